package metrics

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func TestResourceTypesAreWrittenAsKarpenterWritesThem(t *testing.T) {
	for in, want := range map[string]string{"cpu": "cpu", "ephemeral-storage": "ephemeral_storage", "nvidia.com/gpu": "nvidia.com/gpu",
		"hugepages-2Mi": "hugepages_2mi", "capstan.dev/dollars-per-hour": "capstan.dev/dollars-per-hour"} {
		if got := ResourceTypeValue(in); got != want {
			t.Errorf("%s → %s, want %s", in, got, want)
		}
	}
}

// A pool's series follow its status: a limit removed disappears, a deleted pool leaves none.
func TestNodePoolSeriesFollowThePool(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	m.PoolStatus("a", map[string]float64{"cpu": 4, "ephemeral-storage": 100}, map[string]float64{"cpu": 10, "memory": 100}, 0.2)
	m.PoolStatus("b", map[string]float64{"cpu": 2}, map[string]float64{"cpu": 8}, 0.1)
	if got := testutil.ToFloat64(m.NodePoolUsage.WithLabelValues("a", "ephemeral_storage")); got != 100 {
		t.Fatalf("usage ephemeral_storage %v", got)
	}
	m.PoolStatus("a", map[string]float64{"cpu": 4}, map[string]float64{"cpu": 10}, 0.2)
	if n := testutil.CollectAndCount(m.NodePoolLimit); n != 2 {
		t.Fatalf("%d limit series after the memory limit was removed, want a:cpu and b:cpu", n)
	}
	m.PoolDeleted("a")
	for _, v := range []*prometheus.GaugeVec{m.NodePoolUsage, m.NodePoolLimit, m.NodePoolCost} {
		if n := testutil.CollectAndCount(v); n != 1 {
			t.Fatalf("%d series left, want only pool b's", n)
		}
	}
}

// listReader is a client.Reader that lists fixed NodeClaims and NodePools.
type listReader struct {
	client.Reader
	claims []karpv1.NodeClaim
	pools  []karpv1.NodePool
}

func (r *listReader) List(_ context.Context, list client.ObjectList, _ ...client.ListOption) error {
	switch l := list.(type) {
	case *karpv1.NodeClaimList:
		l.Items = r.claims
	case *karpv1.NodePoolList:
		l.Items = r.pools
	}
	return nil
}

// Status conditions are read when scraped: an object gone is a series gone.
func TestStatusConditionsAreScrapedFromTheObjects(t *testing.T) {
	cond := func(typ string, s metav1.ConditionStatus, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: s, Reason: reason}
	}
	r := &listReader{
		claims: []karpv1.NodeClaim{{ObjectMeta: metav1.ObjectMeta{Name: "nc-1"}, Status: karpv1.NodeClaimStatus{Conditions: []metav1.Condition{
			cond("Launched", metav1.ConditionTrue, "Launched"), cond("Registered", metav1.ConditionFalse, "AwaitingRegistration")}}}},
		pools: []karpv1.NodePool{{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Status: karpv1.NodePoolStatus{Conditions: []metav1.Condition{
			cond("Ready", metav1.ConditionTrue, "Ready")}}}},
	}
	c := &StatusConditions{Reader: r}
	want := `
# HELP operator_status_condition_count The status conditions of NodeClaims and NodePools, one series per object and condition.
# TYPE operator_status_condition_count gauge
operator_status_condition_count{kind="NodeClaim",name="nc-1",reason="AwaitingRegistration",status="False",type="Registered"} 1
operator_status_condition_count{kind="NodeClaim",name="nc-1",reason="Launched",status="True",type="Launched"} 1
operator_status_condition_count{kind="NodePool",name="default",reason="Ready",status="True",type="Ready"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	r.claims = nil
	if n := testutil.CollectAndCount(c); n != 1 {
		t.Fatalf("%d series after the NodeClaim was deleted, want the pool's 1", n)
	}
}
