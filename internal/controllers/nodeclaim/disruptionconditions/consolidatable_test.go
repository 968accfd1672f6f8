package disruptionconditions

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
)

func TestConsolidatableAfterConsolidateAfter(t *testing.T) {
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "consol"}})
	sc := simtest.New(t, env.Client)
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "consol"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "consol"}
	np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(10 * time.Minute)
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "consol-1", Labels: map[string]string{karpv1.NodePoolLabelKey: "consol"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: karpv1.Requirements{}}}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), nc) })
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	for _, typ := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized} {
		meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: typ, LastTransitionTime: metav1.NewTime(start)})
	}
	nc.Status.LastPodEventTime = metav1.NewTime(start.Add(5 * time.Minute))
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: clk}
	check := func() (bool, time.Duration) {
		t.Helper()
		res, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "consol-1"}})
		if err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodeClaim{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "consol-1"}, got); err != nil {
			t.Fatal(err)
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, karpv1.ConditionTypeConsolidatable), res.RequeueAfter
	}
	// 10 minutes after the last pod event (at +5m) is +15m.
	clk.SetTime(start.Add(14 * time.Minute))
	if ok, wait := check(); ok || wait != time.Minute {
		t.Fatalf("at +14m: consolidatable %v, requeue after %v; want false, 1m", ok, wait)
	}
	clk.SetTime(start.Add(15 * time.Minute))
	if ok, _ := check(); !ok {
		t.Fatal("not consolidatable 10 minutes after the last pod event")
	}
	// consolidateAfter: Never.
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "consol"}, np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
	if err := env.Client.Update(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	if ok, _ := check(); ok {
		t.Fatal("consolidatable with consolidateAfter Never")
	}
}
