package status

import (
	"context"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/registration"
)

// NodeRegistrationHealthy starts Unknown, is left alone while nothing changes, and goes back to
// Unknown — its record forgotten — when the NodeClass or the pool's spec changes.
func TestRegistrationHealthResetsWhenThePoolOrItsClassChanges(t *testing.T) {
	sc := simtest.New(t, env.Client)
	health := &registration.Tracker{}
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Health: health}
	snc := simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "health"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "health"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: snc.Name}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	get := func() *karpv1.NodePool {
		t.Helper()
		if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(np)}); err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(np), got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	status := func(got *karpv1.NodePool) metav1.ConditionStatus {
		if cond := meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy); cond != nil {
			return cond.Status
		}
		return ""
	}
	got := get()
	if status(got) != metav1.ConditionUnknown || got.Status.NodeClassObservedGeneration != 1 {
		t.Fatalf("a new pool: %s, class generation %d", status(got), got.Status.NodeClassObservedGeneration)
	}
	// Two launches failed (as the lifecycle controller records and writes them).
	unhealthy := func() {
		t.Helper()
		got := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(np), got); err != nil {
			t.Fatal(err)
		}
		health.Record(got, "claim-1", false)
		health.Record(got, "claim-2", false)
		orig := got.DeepCopy()
		cond := meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy)
		cond.Status, cond.Reason = metav1.ConditionFalse, "RegistrationFailed"
		if err := env.Client.Status().Patch(t.Context(), got, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	unhealthy()
	if got := get(); status(got) != metav1.ConditionFalse {
		t.Fatalf("nothing changed, yet the status controller wrote %s", status(got))
	}
	// The NodeClass is edited (a fix, maybe): Unknown, and one more failure is not enough.
	cur := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(snc), cur); err != nil {
		t.Fatal(err)
	}
	cur.Spec.InstanceTypes = append(cur.Spec.InstanceTypes, "c5.large")
	if err := env.Client.Update(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	got = get()
	if status(got) != metav1.ConditionUnknown || got.Status.NodeClassObservedGeneration != cur.Generation {
		t.Fatalf("after a NodeClass change: %s, class generation %d (want %d)", status(got), got.Status.NodeClassObservedGeneration, cur.Generation)
	}
	if s := health.Record(got, "claim-3", false); s != metav1.ConditionUnknown {
		t.Fatalf("the record was not forgotten: one failure after the change gives %s", s)
	}
	// The pool's own spec changes: Unknown again.
	unhealthy()
	got = get()
	orig := got.DeepCopy()
	got.Spec.Template.ObjectMeta.Labels = map[string]string{"team": "web"}
	if err := env.Client.Patch(t.Context(), got, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if got := get(); status(got) != metav1.ConditionUnknown {
		t.Fatalf("after a spec change: %s", status(got))
	}
}

// A NodeClass change reaches the pools that name it, and only them: a pool created before its
// class was Ready must not stay NodeClassReady=False.
func TestANodeClassChangeRequeuesThePoolsNamingIt(t *testing.T) {
	for _, p := range []struct{ name, class string }{{"uses-a", "class-a"}, {"uses-b", "class-b"}, {"uses-a-too", "class-a"}} {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: p.name}}
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: p.class}
		if err := env.Client.Create(t.Context(), np); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	}
	gk := schema.GroupKind{Group: simv1alpha1.Group, Kind: "SimNodeClass"}
	reqs := poolsOfNodeClass(env.Client, gk)(t.Context(), &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "class-a"}})
	var got []string
	for _, r := range reqs {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"uses-a", "uses-a-too"}) {
		t.Fatalf("class-a requeues %v", got)
	}
	if reqs := poolsOfNodeClass(env.Client, schema.GroupKind{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass"})(t.Context(),
		&simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "class-a"}}); len(reqs) != 0 {
		t.Fatalf("another kind of the same name requeues %v", reqs)
	}
}
