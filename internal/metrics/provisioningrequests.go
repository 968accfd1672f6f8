package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	"capstan.dev/capstan/internal/provreq"
)

// provisioningRequests is capstan_provisioning_requests: the ProvisioningRequests of the classes
// Capstan answers, by class and state.
var provisioningRequests = prometheus.NewDesc("capstan_provisioning_requests",
	"ProvisioningRequests of the classes Capstan answers, by class and state (waiting, provisioning, provisioned, failed, booking_expired, capacity_revoked).",
	[]string{"class", "state"}, nil)

// ProvisioningRequests reports the requests as they are when scraped, read from Reader (the
// manager's cache).
type ProvisioningRequests struct {
	Reader client.Reader
}

var _ prometheus.Collector = (*ProvisioningRequests)(nil)

// Describe implements prometheus.Collector.
func (p *ProvisioningRequests) Describe(ch chan<- *prometheus.Desc) { ch <- provisioningRequests }

// Collect implements prometheus.Collector; nothing is reported when the requests cannot be listed.
func (p *ProvisioningRequests) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prs := &autoscalingv1.ProvisioningRequestList{}
	if p.Reader.List(ctx, prs) != nil {
		return
	}
	type key struct{ class, state string }
	counts := map[key]int{}
	for i := range prs.Items {
		pr := &prs.Items[i]
		if provreq.Supported(pr) {
			counts[key{pr.Spec.ProvisioningClassName, provreq.State(pr)}]++
		}
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(provisioningRequests, prometheus.GaugeValue, float64(n), k.class, k.state)
	}
}
