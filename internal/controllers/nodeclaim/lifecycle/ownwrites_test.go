package lifecycle

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// countingCloud counts launch calls.
type countingCloud struct {
	cloudprovider.CloudProvider
	creates atomic.Int32
}

func (c *countingCloud) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	c.creates.Add(1)
	return c.CloudProvider.Create(ctx, nc)
}

// A cache that has not seen the controller's own launch yet (under load it lags seconds, and
// other controllers' writes trigger reconciles meanwhile) does not make it launch, report and
// patch again: the read is recognised as older than its own write, and looked at again later.
// Once the cache shows the launch, the claim goes on as usual.
func TestOwnWriteNotYetCachedIsNotLaunchedAgain(t *testing.T) {
	f := setup(t, "ownwrite", simv1alpha1.Failures{})
	nc := newClaim(t, "ownwrite-1", "ownwrite")
	// As the provisioner creates it: with the finalizer, so the stale copy below is not patched
	// (a patch would answer with the current claim).
	orig := nc.DeepCopy()
	nc.Finalizers = []string{karpv1.TerminationFinalizer}
	if err := env.Client.Patch(t.Context(), nc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	before := nc.DeepCopy()
	cloud := &countingCloud{CloudProvider: f.ctrl.Cloud}
	rec := events.NewFakeRecorder(100)
	f.ctrl.Cloud, f.ctrl.Recorder = cloud, rec
	launched := f.reconcile(t, "ownwrite-1")
	if !isTrue(launched, karpv1.ConditionTypeLaunched) || cloud.creates.Load() != 1 {
		t.Fatalf("first reconcile: launched=%v after %d launch call(s)", isTrue(launched, karpv1.ConditionTypeLaunched), cloud.creates.Load())
	}

	f.ctrl.Client = staleClient{Client: env.Client, stale: before}
	var results []reconcile.Result
	for range 3 {
		res, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "ownwrite-1"}})
		if err != nil {
			t.Fatal(err)
		}
		results = append(results, res)
	}
	if n := cloud.creates.Load(); n != 1 {
		t.Fatalf("reads from before the controller's own launch made %d launch calls, want the first only", n)
	}
	for _, res := range results {
		if res.RequeueAfter <= 0 || res.RequeueAfter > 10*time.Second {
			t.Fatalf("a read from before the launch was not looked at again soon: %+v", res)
		}
	}
	if n := launchedEvents(rec); n != 1 {
		t.Fatalf("%d Launched events, want 1", n)
	}
	after := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "ownwrite-1"}, after); err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != launched.ResourceVersion {
		t.Fatalf("reads from before the launch wrote the claim (resourceVersion %s -> %s)", launched.ResourceVersion, after.ResourceVersion)
	}

	// The cache catches up: the claim is reconciled from what it shows, and not launched again.
	f.ctrl.Client = env.Client
	f.reconcile(t, "ownwrite-1")
	if n := cloud.creates.Load(); n != 1 {
		t.Fatalf("after the cache caught up, %d launch calls", n)
	}
	if f.ctrl.written.Len() != 0 {
		t.Fatalf("%d claims still remembered after the cache caught up", f.ctrl.written.Len())
	}
}

// launchedEvents counts the Launched events the recorder holds.
func launchedEvents(rec *events.FakeRecorder) int {
	n := 0
	for _, e := range drainEvents(rec) {
		if strings.Contains(e, "Launched") {
			n++
		}
	}
	return n
}
