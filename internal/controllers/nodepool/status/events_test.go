package status

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func claimOf(pool string) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c"}}
	if pool != "" {
		nc.Labels = map[string]string{karpv1.NodePoolLabelKey: pool}
	}
	return nc
}

func request(pool string) reconcile.Request {
	return reconcile.Request{NamespacedName: client.ObjectKey{Name: pool}}
}

// A burst's claim changes must cost one status recount per pool and second: a thousand claims
// launching made the status controller list them all and patch the pool on every change.
func TestClaimChangesCoalesceIntoOneRecount(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: fc})
	defer q.ShutDown()
	h := claimEvents(ClaimCoalescing)
	ctx := context.Background()
	h.Create(ctx, event.CreateEvent{Object: claimOf("a")}, q)
	for range 500 {
		h.Update(ctx, event.UpdateEvent{ObjectOld: claimOf("a"), ObjectNew: claimOf("a")}, q)
	}
	h.Update(ctx, event.UpdateEvent{ObjectOld: claimOf("b"), ObjectNew: claimOf("b")}, q)
	h.Delete(ctx, event.DeleteEvent{Object: claimOf("")}, q)
	if n := q.Len(); n != 0 {
		t.Fatalf("%d pools recounted at once; claim changes must wait %v", n, ClaimCoalescing)
	}
	fc.Step(ClaimCoalescing)
	waitLen(t, q, 2)
	got := map[reconcile.Request]bool{}
	for q.Len() > 0 {
		r, _ := q.Get()
		got[r] = true
		q.Done(r)
	}
	if len(got) != 2 || !got[request("a")] || !got[request("b")] {
		t.Fatalf("recounted %v, want pools a and b once each", got)
	}
}

// A claim moved between pools (its label rewritten) changes both pools' counts.
func TestClaimMovedBetweenPoolsRecountsBoth(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request](),
		workqueue.TypedRateLimitingQueueConfig[reconcile.Request]{Clock: fc})
	defer q.ShutDown()
	claimEvents(ClaimCoalescing).Update(context.Background(), event.UpdateEvent{ObjectOld: claimOf("a"), ObjectNew: claimOf("b")}, q)
	fc.Step(ClaimCoalescing)
	waitLen(t, q, 2)
}

// waitLen waits for the delayed entries to reach the queue (a goroutine moves them once the
// clock passed their time).
func waitLen(t *testing.T, q workqueue.TypedRateLimitingInterface[reconcile.Request], n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); q.Len() < n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d pools queued, want %d", q.Len(), n)
		}
	}
}
