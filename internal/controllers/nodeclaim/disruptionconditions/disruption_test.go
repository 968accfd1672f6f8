package disruptionconditions

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/nodeclaim/lifecycle"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestDrift(t *testing.T) {
	snc := simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "drift"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a", "zone-b"}, InstanceTypes: []string{"m5.large"}}})
	sc := simtest.New(t, env.Client)
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "drift"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "drift"}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand", "spot"}}}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "drift-1", Labels: map[string]string{karpv1.NodePoolLabelKey: "drift"},
			Annotations: map[string]string{karpv1.NodePoolHashAnnotationKey: nodepools.Hash(np), karpv1.NodePoolHashVersionAnnotationKey: nodepools.HashVersion}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef,
			Requirements: karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}},
				{Key: karpv1.ZoneLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"zone-b"}}}},
	}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := &karpv1.NodeClaim{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: "drift-1"}, got) == nil {
			got.Finalizers = nil
			_ = env.Client.Update(context.Background(), got)
			_ = env.Client.Delete(context.Background(), got)
		}
	})
	lc := &lifecycle.Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Recorder: events.NewFakeRecorder(10)}
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: "drift-1"}}
	if _, err := lc.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock}
	drifted := func() *metav1.Condition {
		t.Helper()
		if _, err := c.Reconcile(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodeClaim{}
		if err := env.Client.Get(t.Context(), req.NamespacedName, got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeDrifted)
	}
	update := func(o client.Object, mutate func()) {
		t.Helper()
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		mutate()
		if err := env.Client.Update(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}

	// Not drifted: no Drifted condition at all, as Karpenter (its suites list drifted claims as
	// those with one).
	if d := drifted(); d != nil {
		t.Fatalf("fresh claim: Drifted %+v, want none", d)
	}
	// The cloud no longer offers the machine's zone.
	update(snc, func() { snc.Spec.Zones = []string{"zone-a"} })
	if d := drifted(); d == nil || d.Status != metav1.ConditionTrue || d.Reason != "ZoneNotOffered" {
		t.Fatalf("zone removed: Drifted %+v", d)
	}
	update(snc, func() { snc.Spec.Zones = []string{"zone-a", "zone-b"} })
	// The NodePool now wants spot only: the on-demand machine no longer satisfies it.
	update(np, func() {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"spot"}}}
	})
	if d := drifted(); d == nil || d.Status != metav1.ConditionTrue || d.Reason != ReasonRequirementsDrifted {
		t.Fatalf("requirements changed: Drifted %+v", d)
	}
	// A template change (taints) drifts by hash.
	update(np, func() {
		np.Spec.Template.Spec.Requirements = nil
		np.Spec.Template.Spec.Taints = karpv1.Taints{{Key: "new", Effect: corev1.TaintEffectNoSchedule}}
	})
	if d := drifted(); d == nil || d.Status != metav1.ConditionTrue || d.Reason != ReasonNodePoolDrifted {
		t.Fatalf("template changed: Drifted %+v", d)
	}
	// Back to the original template: no longer drifted.
	update(np, func() {
		np.Spec.Template.Spec.Taints = nil
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand", "spot"}}}
	})
	if d := drifted(); d != nil {
		t.Fatalf("template restored: Drifted %+v, want none", d)
	}
}
