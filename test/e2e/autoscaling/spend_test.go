package autoscaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/spend"
)

// onDemandPrice is an instance type's hourly on-demand price in the embedded catalog.
func onDemandPrice(name string) float64 {
	for _, e := range catalogEntries {
		if e.Name == name {
			return e.OnDemandPriceUSD[catalog.Region]
		}
	}
	return 0
}

// mostItMayCost is what an on-demand NodeClaim may cost, read from the catalog: its instance
// type's price once it has one, before that the dearest type its requirements allow.
func mostItMayCost(nc karpv1.NodeClaim) float64 {
	if it := nc.Labels[karpv1.InstanceTypeLabelKey]; it != "" {
		return onDemandPrice(it)
	}
	worst := 0.0
	for _, r := range nc.Spec.Requirements {
		if r.Key == karpv1.InstanceTypeLabelKey && r.Operator == karpv1.NodeSelectorOpIn {
			for _, v := range r.Values {
				worst = max(worst, onDemandPrice(v))
			}
		}
	}
	return worst
}

// A NodePool's spending limit (limits capstan.dev/dollars-per-hour: "1.5") holds at every moment
// of a 400-pod burst that would cost more, whichever type each claim may still launch as; the
// pods left pending are told the spending limit holds them, and the pool's status shows what its
// machines cost next to the limit.
func TestSpendingLimitHoldsAtEveryMoment(t *testing.T) {
	const limit = 1.5
	pool(t, "e2e-spend", nil, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
		np.Spec.Limits = corev1.ResourceList{spend.LimitKey: resource.MustParse("1.5")}
	})
	deployment(t, "spend", "e2e-spend", 400, "500m", "512Mi", nil)
	spendHeldThroughABurst(t, limit, "e2e-spend")
	podToldOf(t, "spend-", "spending limit (capstan.dev/dollars-per-hour)")
	eventually(t, "the pool's status shows its spend", time.Minute, func(ctx context.Context) (bool, error) {
		np := &karpv1.NodePool{}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: "e2e-spend"}, np); err != nil {
			return false, err
		}
		// In dollars too (status.spend, kubectl get nodepools -o wide's SPEND): the quantity
		// reads "850m".
		q, ok := np.Status.Resources[spend.LimitKey]
		return ok && q.AsApproximateFloat64() > 0 && q.AsApproximateFloat64() <= limit &&
			np.Status.Spend == fmt.Sprintf("$%.3f/h of $%.3f/h", q.AsApproximateFloat64(), limit), nil
	})
}

// The cluster's spending limit (--spending-limit 1.5) holds across two NodePools at every moment
// of a burst in both that would cost more, and a pod left pending is told the cluster's limit
// holds it. Capstan is restarted with the limit once no NodeClaim of another test is left (the
// limit counts every claim of the cluster), and without it after.
func TestClusterSpendingLimitHoldsAcrossPools(t *testing.T) {
	const limit = 1.5
	eventually(t, "no NodeClaim left by another test", 3*time.Minute, func(ctx context.Context) (bool, error) {
		ncs := &karpv1.NodeClaimList{}
		if err := s.Client.List(ctx, ncs); err != nil {
			return false, err
		}
		return len(ncs.Items) == 0, nil
	})
	stopCapstan(syscall.SIGTERM)
	if err := startCapstan("--spending-limit=1.5"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopCapstan(syscall.SIGTERM)
		if err := startCapstan(); err != nil {
			t.Error(err)
		}
	})
	onDemand := func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	}
	pool(t, "e2e-cluster-spend-a", nil, onDemand)
	pool(t, "e2e-cluster-spend-b", nil, onDemand)
	deployment(t, "cspend-a", "e2e-cluster-spend-a", 200, "500m", "512Mi", nil)
	deployment(t, "cspend-b", "e2e-cluster-spend-b", 200, "500m", "512Mi", nil)
	spendHeldThroughABurst(t, limit, "e2e-cluster-spend-a", "e2e-cluster-spend-b")
	podToldOf(t, "cspend-", "the cluster's spending limit (--spending-limit)")
}

// spendHeldThroughABurst checks every 200 ms for 40 s that the pools' NodeClaims may cost at most
// limit together (mostItMayCost), and then that they cost at least half of it: the limit holds
// and does not throttle the burst.
func spendHeldThroughABurst(t *testing.T, limit float64, pools ...string) {
	t.Helper()
	check := func() float64 {
		total, n := 0.0, 0
		for _, p := range pools {
			for _, nc := range claims(t, p) {
				total += mostItMayCost(nc)
				n++
			}
		}
		if total > limit+1e-9 {
			t.Fatalf("the %d NodeClaims of %v may cost $%.4f/h, the spending limit is $%.2f/h", n, pools, total, limit)
		}
		return total
	}
	deadline := time.Now().Add(40 * time.Second)
	for time.Now().Before(deadline) {
		check()
		time.Sleep(200 * time.Millisecond)
	}
	if total := check(); total < limit/2 {
		t.Fatalf("the NodeClaims of %v cost $%.4f/h under a $%.2f/h limit: the limit throttled the burst", pools, total, limit)
	}
}

// podToldOf waits for an event on a pod whose name starts with prefix that says what.
func podToldOf(t *testing.T, prefix, what string) {
	t.Helper()
	eventually(t, "a pod told "+what, time.Minute, func(ctx context.Context) (bool, error) {
		ev := &corev1.EventList{}
		if err := s.Client.List(ctx, ev, client.InNamespace("default")); err != nil {
			return false, err
		}
		return slices.ContainsFunc(ev.Items, func(e corev1.Event) bool {
			return strings.HasPrefix(e.InvolvedObject.Name, prefix) && strings.Contains(e.Message, what)
		}), nil
	})
}
