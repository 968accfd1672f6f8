package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// statusConditionCount is operator_status_condition_count, as Karpenter's operator library names
// it: one series per object and condition, valued 1.
var statusConditionCount = prometheus.NewDesc("operator_status_condition_count",
	"The status conditions of NodeClaims and NodePools, one series per object and condition.",
	[]string{"kind", "name", "type", "status", "reason"}, nil)

// StatusConditions reports the conditions of NodeClaims and NodePools as they are when scraped,
// read from Reader (the manager's cache), so the series of a deleted object vanish with it.
type StatusConditions struct {
	Reader client.Reader
}

var _ prometheus.Collector = (*StatusConditions)(nil)

// Describe implements prometheus.Collector.
func (s *StatusConditions) Describe(ch chan<- *prometheus.Desc) { ch <- statusConditionCount }

// Collect implements prometheus.Collector; objects that cannot be listed are left out.
func (s *StatusConditions) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	emit := func(kind, name string, conds []metav1.Condition) {
		for _, c := range conds {
			ch <- prometheus.MustNewConstMetric(statusConditionCount, prometheus.GaugeValue, 1, kind, name, c.Type, string(c.Status), c.Reason)
		}
	}
	ncs := &karpv1.NodeClaimList{}
	if s.Reader.List(ctx, ncs) == nil {
		for i := range ncs.Items {
			emit("NodeClaim", ncs.Items[i].Name, ncs.Items[i].Status.Conditions)
		}
	}
	nps := &karpv1.NodePoolList{}
	if s.Reader.List(ctx, nps) == nil {
		for i := range nps.Items {
			emit("NodePool", nps.Items[i].Name, nps.Items[i].Status.Conditions)
		}
	}
}
