package garbagecollection

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/nodeclaim/lifecycle"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func claim(name string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "gc"},
			Requirements: karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}},
		}}
}

func TestOrphansAndVanishedMachines(t *testing.T) {
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gc"}, Spec: simv1alpha1.SimNodeClassSpec{InstanceTypes: []string{"m5.large"}}})
	sc := simtest.New(t, env.Client)
	clk, cloud, p := sc.Clock, sc.Cloud, sc.Provider
	gc := &Controller{Client: env.Client, Cloud: p, Clock: clk}

	// A machine launched for a NodeClaim that was never stored: an orphan.
	if _, err := p.Create(t.Context(), claim("lost")); err != nil {
		t.Fatal(err)
	}
	// A NodeClaim whose machine is terminated behind its back.
	kept := claim("kept")
	if err := env.Client.Create(t.Context(), kept); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc := &karpv1.NodeClaim{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: "kept"}, nc) == nil {
			nc.Finalizers = nil
			_ = env.Client.Update(context.Background(), nc)
		}
	})
	lc := &lifecycle.Controller{Client: env.Client, Cloud: p, Clock: clk, Recorder: events.NewFakeRecorder(10)}
	if _, err := lc.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "kept"}}); err != nil {
		t.Fatal(err)
	}
	if len(cloud.Instances()) != 2 {
		t.Fatalf("%d machines, want 2", len(cloud.Instances()))
	}
	// Within the grace window the orphan survives (its claim might still be on its way).
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(cloud.Instances()) != 2 {
		t.Fatal("an orphan was collected within the grace period")
	}
	clk.Step(GracePeriod + time.Second)
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	left := cloud.Instances()
	if len(left) != 1 || left[0].NodeClaim != "kept" {
		t.Fatalf("machines left %+v, want only kept's", left)
	}
	// Now the claimed machine vanishes: the claim is deleted.
	if _, err := cloud.Terminate(left[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "kept"}, nc); err != nil {
		t.Fatal(err)
	}
	if nc.DeletionTimestamp.IsZero() {
		t.Fatal("the NodeClaim of a vanished machine was not deleted")
	}
}
