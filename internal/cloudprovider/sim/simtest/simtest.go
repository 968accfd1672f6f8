// Package simtest sets up the simulated cloud for controller tests: a provider that reads
// SimNodeClasses from a real API server, a cloud without persistence, and a fake clock to step.
package simtest

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
)

// Cloud is a simulated cloud for a test.
type Cloud struct {
	Provider *sim.Provider
	Cloud    *sim.Cloud
	Clock    *clocktesting.FakeClock
	// Joiner registers due machines when its Sync is called.
	Joiner *sim.Joiner
}

// New returns a simulated cloud over c, its clock starting now.
func New(t testing.TB, c client.Client) *Cloud {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	cloud, err := sim.NewCloud(clk, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := sim.NewProvider(c, cloud, clk, unavailable.New(clk, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return &Cloud{Provider: p, Cloud: cloud, Clock: clk, Joiner: &sim.Joiner{Cloud: cloud, Client: c}}
}

// NodeClass creates a SimNodeClass for the test and deletes it afterwards.
func NodeClass(t testing.TB, c client.Client, snc *simv1alpha1.SimNodeClass) *simv1alpha1.SimNodeClass {
	t.Helper()
	if err := c.Create(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), snc) })
	return snc
}

// CleanupClaim deletes, at the end of the test, the NodeClaim and the Node named name if they are
// still there, finalizers removed: a failed test must not leave them for the next, whose
// simulated cloud hands out the same instance IDs.
func CleanupClaim(t testing.TB, c client.Client, name string) {
	t.Cleanup(func() {
		ctx := context.Background()
		for _, o := range []client.Object{&karpv1.NodeClaim{}, &corev1.Node{}} {
			if err := c.Get(ctx, client.ObjectKey{Name: name}, o); err == nil {
				o.SetFinalizers(nil)
				_ = c.Update(ctx, o)
				_ = c.Delete(ctx, o)
			}
		}
	})
}
