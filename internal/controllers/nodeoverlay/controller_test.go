package nodeoverlay

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/provisioning"
	"capstan.dev/capstan/internal/overlay"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// fixture is a SimNodeClass offering on-demand m5.large (0.096 $/h) and c5.large (0.085 $/h), a
// NodePool over it, and the overlays controller with its store.
type fixture struct {
	sc    *simtest.Cloud
	ctl   *Controller
	store *overlay.Store
	pool  *karpv1.NodePool
}

func setup(t *testing.T, name string) *fixture {
	t.Helper()
	ctx := t.Context()
	snc := simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large", "c5.large"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: simv1alpha1.SimNodeClassKind, Name: snc.Name}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	if err := env.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	sc := simtest.New(t, env.Client)
	store := &overlay.Store{}
	sc.Provider.SetOverlays(store.ForLaunches())
	return &fixture{sc: sc, store: store, pool: np,
		ctl: &Controller{Client: env.Client, Cloud: sc.Provider, Store: store, Clock: sc.Clock}}
}

func createOverlay(t *testing.T, o *v1alpha1.NodeOverlay) {
	t.Helper()
	if err := env.Client.Create(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
}

func (f *fixture) evaluate(t *testing.T) {
	t.Helper()
	if _, err := f.ctl.Reconcile(t.Context(), reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
}

// launch plans one pending pod through the overlaid provider and launches its NodeClaim: the
// instance type bought.
func (f *fixture) launch(t *testing.T, ns string) string {
	t.Helper()
	ctx := t.Context()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	if err := env.Client.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}
	p := &provisioning.Provisioner{Client: env.Client, Cloud: cloudprovider.WithOverlays(f.sc.Provider, f.store), Clock: f.sc.Clock,
		Recorder: events.NewFakeRecorder(100)}
	res, err := p.Provision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 1 {
		t.Fatalf("%d claims for one pod", len(res.Created))
	}
	nc := res.Created[0]
	simtest.CleanupClaim(t, env.Client, nc.Name)
	launched, err := f.sc.Provider.Create(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	return launched.Labels[karpv1.InstanceTypeLabelKey]
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "overlay-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns.Name), client.GracePeriodSeconds(0))
		_ = env.Client.Delete(context.Background(), ns)
	})
	return ns.Name
}

// The savings-plan case (aws#2259): c5.large is nominally cheaper; a 25% discount on on-demand
// m5 makes m5.large the cheaper machine, and the pool buys it. Without the overlay it buys c5.
func TestASavingsPlanDiscountBuysTheDiscountedFamily(t *testing.T) {
	f := setup(t, "overlay-savings")
	f.evaluate(t)
	if got := f.launch(t, namespace(t)); got != "c5.large" {
		t.Fatalf("without an overlay bought %s, want the nominally cheaper c5.large", got)
	}
	createOverlay(t, &v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "overlay-savings-plan"},
		Spec: v1alpha1.NodeOverlaySpec{
			Requirements: []v1alpha1.NodeSelectorRequirement{
				{Key: "karpenter.k8s.aws/instance-family", Operator: corev1.NodeSelectorOpIn, Values: []string{"m5"}},
				{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
				{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{f.pool.Name}}},
			PriceAdjustment: ptr.To("-25%")}})
	f.evaluate(t)
	if got := f.launch(t, namespace(t)); got != "m5.large" {
		t.Fatalf("with the discount bought %s, want m5.large (0.072 $/h against c5.large's 0.085)", got)
	}
	its, err := cloudprovider.WithOverlays(f.sc.Provider, f.store).GetInstanceTypes(t.Context(), f.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		if it.Name == "m5.large" && fmt.Sprintf("%.3f", it.Offerings[0].Price) != "0.072" {
			t.Errorf("m5.large as the controllers read it: %v, want 0.072", it.Offerings)
		}
	}
}

// Two overlays of one weight pricing the same offerings: the one taken second (names in reverse
// order) says Conflict on its conditions and applies nowhere; the other is Ready. Removing the
// winner lets the other apply.
func TestConflictingOverlaysAreReported(t *testing.T) {
	f := setup(t, "overlay-conflict")
	mk := func(name, price string) *v1alpha1.NodeOverlay {
		return &v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.NodeOverlaySpec{
			Requirements: []v1alpha1.NodeSelectorRequirement{{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{f.pool.Name}}},
			Price:        ptr.To(price), Weight: ptr.To(int32(7))}}
	}
	a, b := mk("overlay-conflict-a", "0.5"), mk("overlay-conflict-b", "0.01")
	createOverlay(t, a)
	createOverlay(t, b)
	f.evaluate(t)
	cond := func(o *v1alpha1.NodeOverlay, typ string) *metav1.Condition {
		t.Helper()
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(o.Status.Conditions, typ)
	}
	if c := cond(a, overlay.ConditionValidationSucceeded); c == nil || c.Status != metav1.ConditionFalse || c.Reason != overlay.ReasonConflict {
		t.Fatalf("a's ValidationSucceeded %+v, want False/Conflict", c)
	}
	if c := cond(a, overlay.ConditionReady); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("a's Ready %+v, want False", c)
	}
	if c := cond(b, overlay.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("b's Ready %+v, want True", c)
	}
	its, err := f.store.Apply(f.pool.Name, mustTypes(t, f))
	if err != nil || its[0].Offerings[0].Price != 0.01 {
		t.Fatalf("prices %v (%v), want b's 0.01", its[0].Offerings, err)
	}
	if err := env.Client.Delete(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	f.evaluate(t)
	if c := cond(a, overlay.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("a's Ready after b went %+v, want True", c)
	}
	if its, _ := f.store.Apply(f.pool.Name, mustTypes(t, f)); its[0].Offerings[0].Price != 0.5 {
		t.Fatalf("prices %v, want a's 0.5", its[0].Offerings)
	}
}

func mustTypes(t *testing.T, f *fixture) []*cloudprovider.InstanceType {
	t.Helper()
	its, err := f.sc.Provider.GetInstanceTypes(t.Context(), f.pool)
	if err != nil {
		t.Fatal(err)
	}
	return its
}

// Until the overlays are evaluated, a NodePool's instance types are not answered (so nothing is
// bought at prices the overlays change) and its status keeps its conditions.
func TestNothingIsPlannedBeforeTheFirstEvaluation(t *testing.T) {
	f := setup(t, "overlay-pending")
	_, err := cloudprovider.WithOverlays(f.sc.Provider, f.store).GetInstanceTypes(t.Context(), f.pool)
	var pending *cloudprovider.OverlaysPendingError
	if !errors.As(err, &pending) || pending.NodePool != f.pool.Name {
		t.Fatalf("before evaluation: %v, want OverlaysPendingError for %s", err, f.pool.Name)
	}
	f.evaluate(t)
	if _, err := cloudprovider.WithOverlays(f.sc.Provider, f.store).GetInstanceTypes(t.Context(), f.pool); err != nil {
		t.Fatalf("after evaluation: %v", err)
	}
}

// With the gate off an overlay is accepted and says on its conditions that it is not applied.
func TestGateOffOverlaysSaySo(t *testing.T) {
	sc := simtest.New(t, env.Client)
	o := &v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "overlay-gate-off"}, Spec: v1alpha1.NodeOverlaySpec{Price: ptr.To("0.01")}}
	createOverlay(t, o)
	c := &Controller{Client: env.Client, Clock: sc.Clock, Disabled: true}
	if _, err := c.Reconcile(t.Context(), reconcile.Request{}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{overlay.ConditionReady, overlay.ConditionValidationSucceeded} {
		if c := meta.FindStatusCondition(o.Status.Conditions, typ); c == nil || c.Status != metav1.ConditionFalse || c.Reason != overlay.ReasonFeatureGateDisabled {
			t.Errorf("%s: %+v, want False/FeatureGateDisabled", typ, c)
		}
	}
}
