package aws

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
)

// TestInterruptionStorm: N spot machines, each running one pod, get Spot interruption warnings
// within a minute. Each is handled once — its NodeClaim deleted, one new machine bought for its
// pod (2N NodeClaims in all) — the NodePool's limit of 1.5 N nodes holds at every moment (from a
// watch of every NodeClaim), every message is deleted from the queue and none is
// dead-lettered, no instance is left without a NodeClaim, and every pod runs again.
func TestInterruptionStorm(t *testing.T) {
	n := setting("STORM", 8, 50)
	nodesLimit := n + n/2
	const name = "storm"
	pool(t, name, karpv1.CapacityTypeSpot, func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{karpv1.ResourceNodes: *resource.NewQuantity(int64(nodesLimit), resource.DecimalSI)}
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimLog := h.WatchClaims(t, ctx, name)

	spreadDeployment(t, name, int32(n))
	eventually(t, "every pod Running on spot", 5*time.Minute, h.Running(t, name, n))
	var victims []string
	for _, c := range h.Claims(t, name) {
		insts := cloud.LiveInstances(aws.NodeClaimTag, c.Name)
		if len(insts) != 1 || insts[0].Lifecycle != "spot" {
			t.Fatalf("instances of %s: %+v", c.Name, insts)
		}
		victims = append(victims, insts[0].ID)
	}
	// The storm: every machine warned within a minute.
	began := time.Now()
	for i, id := range victims {
		time.Sleep(time.Until(began.Add(time.Duration(i) * time.Minute / time.Duration(len(victims)))))
		if err := cloud.InterruptSpot(id, queue); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every interrupted machine and NodeClaim gone and every pod Running on a new one", 10*time.Minute, func(ctx context.Context) (bool, error) {
		for _, inst := range cloud.LiveInstances("", "") {
			if slices.Contains(victims, inst.ID) {
				return false, nil
			}
		}
		if len(h.Claims(t, name)) != n {
			return false, nil
		}
		return h.Running(t, name, n)(ctx)
	})
	settled := time.Since(began)
	eventually(t, "the queue empty", 2*time.Minute, func(context.Context) (bool, error) { return len(cloud.Messages(queue)) == 0, nil })
	dlq := len(cloud.Messages(queue + "-dlq"))
	seen := claimLog.Seen()
	live := len(h.Claims(t, name))
	orphans := orphans(t, name)
	if len(seen) != 2*n || claimLog.MaxLive() > nodesLimit || dlq != 0 || orphans != 0 || live != n {
		t.Errorf("%d NodeClaims in all (want %d), at most %d at once (limit %d), %d left (want %d), %d dead-lettered, %d instances without a claim",
			len(seen), 2*n, claimLog.MaxLive(), nodesLimit, live, n, dlq, orphans)
	}
	figures("interruption-storm warnings=%d within=1m nodeclaims-in-all=%d (want %d) most-at-once=%d limit=%d queue-left=0 dead-lettered=%d orphans=%d pods-running=%d/%d all-replaced-after=%s",
		n, len(seen), 2*n, claimLog.MaxLive(), nodesLimit, dlq, orphans, n, n, settled.Round(time.Second))
}
