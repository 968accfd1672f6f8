package static

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

type fixture struct {
	t   *testing.T
	ctl *Controller
	rec *events.FakeRecorder
	np  *karpv1.NodePool
}

// setup makes a static pool of the test's name over its own SimNodeClass.
func setup(t *testing.T, replicas int64, mutate func(*karpv1.NodePool)) *fixture {
	t.Helper()
	name := strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	name = name[:min(len(name), 50)]
	snc := simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karpv1.NodePoolSpec{Replicas: &replicas}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: simv1alpha1.SimNodeClassKind, Name: snc.Name}
	if mutate != nil {
		mutate(np)
	}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		l := &karpv1.NodeClaimList{}
		_ = env.Client.List(ctx, l, client.MatchingLabels{karpv1.NodePoolLabelKey: name})
		for i := range l.Items {
			l.Items[i].Finalizers = nil
			_ = env.Client.Update(ctx, &l.Items[i])
			_ = env.Client.Delete(ctx, &l.Items[i])
		}
		_ = env.Client.Delete(ctx, np)
	})
	sc := simtest.New(t, env.Client)
	rec := events.NewFakeRecorder(100)
	return &fixture{t: t, rec: rec, np: np,
		ctl: &Controller{Client: env.Client, APIReader: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Recorder: rec}}
}

func (f *fixture) reconcile() {
	f.t.Helper()
	if _, err := f.ctl.Reconcile(f.t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(f.np)}); err != nil {
		f.t.Fatal(err)
	}
}

// claims are the pool's claims not being deleted, by name.
func (f *fixture) claims() []karpv1.NodeClaim {
	f.t.Helper()
	l := &karpv1.NodeClaimList{}
	if err := env.Client.List(f.t.Context(), l, client.MatchingLabels{karpv1.NodePoolLabelKey: f.np.Name}); err != nil {
		f.t.Fatal(err)
	}
	out := slices.DeleteFunc(l.Items, func(nc karpv1.NodeClaim) bool { return !nc.DeletionTimestamp.IsZero() })
	slices.SortFunc(out, func(a, b karpv1.NodeClaim) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func names(ncs []karpv1.NodeClaim) []string {
	var out []string
	for _, nc := range ncs {
		out = append(out, nc.Name)
	}
	return out
}

// launched marks a claim launched on a node of its own name, initialised, drifted if asked.
func (f *fixture) launched(nc karpv1.NodeClaim, initialized, drifted bool) {
	f.t.Helper()
	nc.Status.ProviderID, nc.Status.NodeName = "sim:///"+nc.Name, nc.Name
	set := func(t string, on bool) {
		s := metav1.ConditionFalse
		if on {
			s = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: t, LastTransitionTime: metav1.Now()})
	}
	set(karpv1.ConditionTypeLaunched, true)
	set(karpv1.ConditionTypeInitialized, initialized)
	if drifted {
		set(karpv1.ConditionTypeDrifted, true)
	}
	if err := env.Client.Status().Update(f.t.Context(), &nc); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) setReplicas(n int32) {
	f.t.Helper()
	// Through the scale subresource, as `kubectl scale nodepool NAME --replicas N` does.
	scale := &autoscalingv1.Scale{}
	if err := env.Client.SubResource("scale").Get(f.t.Context(), f.np, scale); err != nil {
		f.t.Fatal(err)
	}
	scale.Spec.Replicas = n
	if err := env.Client.SubResource("scale").Update(f.t.Context(), f.np, client.WithSubResourceBody(scale)); err != nil {
		f.t.Fatal(err)
	}
	if err := env.Client.Get(f.t.Context(), client.ObjectKeyFromObject(f.np), f.np); err != nil {
		f.t.Fatal(err)
	}
	if *f.np.Spec.Replicas != int64(n) {
		f.t.Fatalf("replicas %d after scaling to %d", *f.np.Spec.Replicas, n)
	}
}

// A static pool launches its replicas once (a second reconcile buys nothing more), and scaling
// it in removes the claims that cost least to remove: not launched first, then the emptier node.
func TestStaticPoolKeepsItsReplicaCount(t *testing.T) {
	f := setup(t, 3, nil)
	f.reconcile()
	f.reconcile()
	got := f.claims()
	if len(got) != 3 {
		t.Fatalf("%d claims, want 3", len(got))
	}
	for _, nc := range got {
		if nc.Labels[karpv1.NodePoolLabelKey] != f.np.Name || len(nc.OwnerReferences) != 1 || nc.Spec.NodeClassRef.Name != f.np.Name {
			t.Fatalf("claim %s not made from the pool's template: %+v", nc.Name, nc.ObjectMeta)
		}
	}
	busy, empty, unlaunched := got[0], got[1], got[2]
	f.launched(busy, true, false)
	f.launched(empty, true, false)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "static-" + busy.Name, Namespace: "default"},
		Spec: corev1.PodSpec{NodeName: busy.Name, Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}}}
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })

	f.setReplicas(2)
	f.reconcile()
	if got := names(f.claims()); !slices.Equal(got, []string{busy.Name, empty.Name}) {
		t.Fatalf("after scaling to 2: %v, want the unlaunched %s gone", got, unlaunched.Name)
	}
	f.setReplicas(1)
	f.reconcile()
	if got := names(f.claims()); !slices.Equal(got, []string{busy.Name}) {
		t.Fatalf("after scaling to 1: %v, want the empty %s gone and %s (one pod) kept", got, empty.Name, busy.Name)
	}
	f.setReplicas(2)
	f.reconcile()
	if n := len(f.claims()); n != 2 {
		t.Fatalf("after scaling back to 2: %d claims", n)
	}
}

// Scaling a static pool in takes the nodes whose pods karpenter.sh/do-not-disrupt protects last,
// even when they hold fewer pods (Karpenter's "should terminate empty nodes first, then nodes
// with least cost, then respect do-not-disrupt").
func TestStaticScaleInTakesDoNotDisruptNodesLast(t *testing.T) {
	f := setup(t, 3, nil)
	f.reconcile()
	got := f.claims()
	if len(got) != 3 {
		t.Fatalf("%d claims, want 3", len(got))
	}
	pinned, busy, other := got[0], got[1], got[2]
	for _, nc := range got {
		f.launched(nc, true, false)
	}
	bind := func(name, node string, annotations map[string]string) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
	}
	bind("dnd-pinned", pinned.Name, map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"})
	bind("dnd-busy-1", busy.Name, nil)
	bind("dnd-busy-2", busy.Name, nil)
	bind("dnd-other", other.Name, nil)
	f.setReplicas(1)
	f.reconcile()
	if got := names(f.claims()); !slices.Equal(got, []string{pinned.Name}) {
		t.Fatalf("after scaling to 1: %v, want only %s (its pod has do-not-disrupt)", got, pinned.Name)
	}
}

// limits.nodes bounds the pool, deleting claims included, and says so in an event.
func TestNodeLimitBoundsTheStaticPool(t *testing.T) {
	f := setup(t, 3, func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{karpv1.ResourceNodes: resource.MustParse("2")}
	})
	f.reconcile()
	if n := len(f.claims()); n != 2 {
		t.Fatalf("%d claims, want 2 (limits.nodes)", n)
	}
	f.reconcile()
	if n := len(f.claims()); n != 2 {
		t.Fatalf("%d claims after a second pass, want 2", n)
	}
	select {
	case e := <-f.rec.Events:
		if !strings.Contains(e, "NodeLimitReached") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no event for the limit")
	}
}

// A drifted node is replaced launch-first: the replacement is created, the drifted node stays
// until it is initialised, then goes.
func TestDriftedStaticNodeIsReplacedBeforeItGoes(t *testing.T) {
	f := setup(t, 1, nil)
	f.reconcile()
	old := f.claims()[0]
	f.launched(old, true, true)
	f.reconcile()
	got := f.claims()
	if len(got) != 2 {
		t.Fatalf("%v: want the drifted claim and its replacement", names(got))
	}
	repl := got[0]
	if repl.Name == old.Name {
		repl = got[1]
	}
	f.reconcile()
	f.launched(repl, false, false)
	f.reconcile()
	if got := names(f.claims()); len(got) != 2 {
		t.Fatalf("%v: the drifted claim went before its replacement was initialised", got)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(&repl), &repl); err != nil {
		t.Fatal(err)
	}
	f.launched(repl, true, false)
	f.reconcile()
	if got := names(f.claims()); !slices.Equal(got, []string{repl.Name}) {
		t.Fatalf("%v: want only the replacement %s", got, repl.Name)
	}
}

// With limits.nodes == replicas there is no room for a replacement (aws#8873): the drifted node
// is deleted first, and the pool refilled once it is gone.
func TestDriftAtTheNodeLimitDeletesFirst(t *testing.T) {
	f := setup(t, 1, func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{karpv1.ResourceNodes: resource.MustParse("1")}
	})
	f.reconcile()
	old := f.claims()[0]
	f.launched(old, true, true)
	f.reconcile()
	if got := f.claims(); len(got) != 0 {
		t.Fatalf("%v: want the drifted claim deleting and nothing launched beside it", names(got))
	}
	f.reconcile()
	if got := f.claims(); len(got) != 0 {
		t.Fatalf("%v: launched while the drifted claim still counts against limits.nodes", names(got))
	}
	// Its termination finishes.
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(&old), &old); err != nil {
		t.Fatal(err)
	}
	old.Finalizers = nil
	if err := env.Client.Update(t.Context(), &old); err != nil {
		t.Fatal(err)
	}
	f.reconcile()
	if got := f.claims(); len(got) != 1 || got[0].Name == old.Name {
		t.Fatalf("%v: want one new claim", names(got))
	}
}

// A Drifted budget of zero holds the replacement, with an event.
func TestDriftBudgetHoldsStaticReplacement(t *testing.T) {
	f := setup(t, 1, func(np *karpv1.NodePool) {
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonDrifted}}}
	})
	f.reconcile()
	f.launched(f.claims()[0], true, true)
	for range 2 {
		f.reconcile()
	}
	if n := len(f.claims()); n != 1 {
		t.Fatalf("%d claims: the budget of 0 did not hold the drift", n)
	}
	select {
	case e := <-f.rec.Events:
		if !strings.Contains(e, "DisruptionBlocked") || !strings.Contains(e, "Drifted budget") {
			t.Fatalf("event %q", e)
		}
	case <-time.After(time.Second):
		t.Fatal("no event for the budget")
	}
}

// A dynamic pool is not this controller's.
func TestDynamicPoolsAreLeftAlone(t *testing.T) {
	f := setup(t, 1, nil)
	dyn := f.np.DeepCopy()
	dyn.ObjectMeta = metav1.ObjectMeta{Name: f.np.Name + "-dyn"}
	dyn.Spec.Replicas = nil
	if err := env.Client.Create(t.Context(), dyn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), dyn) })
	if _, err := f.ctl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(dyn)}); err != nil {
		t.Fatal(err)
	}
	l := &karpv1.NodeClaimList{}
	if err := env.Client.List(t.Context(), l, client.MatchingLabels{karpv1.NodePoolLabelKey: dyn.Name}); err != nil || len(l.Items) != 0 {
		t.Fatalf("%d claims for a dynamic pool (%v)", len(l.Items), err)
	}
}

// A drifted node of a pool whose launches do not register waits: its replacement would fail the
// same way, and at the node limit deleting first would lose the node.
func TestDriftWaitsWhileThePoolsLaunchesDoNotRegister(t *testing.T) {
	f := setup(t, 1, nil)
	f.reconcile()
	f.launched(f.claims()[0], true, true)
	np := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(f.np), np); err != nil {
		t.Fatal(err)
	}
	np.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeNodeRegistrationHealthy, Status: metav1.ConditionFalse,
		Reason: "RegistrationFailed", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		f.reconcile()
	}
	if n := len(f.claims()); n != 1 {
		t.Fatalf("%d claims: a replacement was launched from a pool whose launches do not register", n)
	}
	select {
	case e := <-f.rec.Events:
		if !strings.Contains(e, "DisruptionBlocked") || !strings.Contains(e, "NodeRegistrationHealthy=False") {
			t.Fatalf("event %q", e)
		}
	case <-time.After(time.Second):
		t.Fatal("no event for the wait")
	}
}

// With NodeRepair, a static pool's node unready past its toleration is deleted and the pool
// refilled; with 2 of 5 unhealthy (more than 20%) none is, and an event says why.
func TestUnhealthyStaticNodeIsRepaired(t *testing.T) {
	f := setup(t, 5, nil)
	f.ctl.NodeRepair = true
	f.reconcile()
	claims := f.claims()
	if len(claims) != 5 {
		t.Fatalf("%d claims, want 5", len(claims))
	}
	for _, nc := range claims {
		f.launched(nc, true, false)
	}
	node := func(name string, ready corev1.ConditionStatus, since time.Duration) {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := env.Client.Create(t.Context(), n); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(n), n); err != nil {
			t.Fatal(err)
		}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, LastTransitionTime: metav1.NewTime(f.ctl.Clock.Now().Add(-since))}}
		if err := env.Client.Status().Update(t.Context(), n); err != nil {
			t.Fatal(err)
		}
	}
	node(claims[0].Name, corev1.ConditionUnknown, 31*time.Minute)
	node(claims[1].Name, corev1.ConditionFalse, 45*time.Minute)
	f.reconcile()
	if n := len(f.claims()); n != 5 {
		t.Fatalf("%d claims left with 2 of 5 unhealthy: want none repaired", n)
	}
	select {
	case e := <-f.rec.Events:
		if !strings.Contains(e, "NodeRepairBlocked") || !strings.Contains(e, "2 of NodePool") {
			t.Fatalf("event %q", e)
		}
	case <-time.After(time.Second):
		t.Fatal("no event for the blocked repair")
	}
	node(claims[0].Name, corev1.ConditionTrue, time.Minute)
	f.reconcile()
	left := names(f.claims())
	if len(left) != 4 || slices.Contains(left, claims[1].Name) {
		t.Fatalf("claims %v: want %s, unready for 45 minutes, deleted", left, claims[1].Name)
	}
	f.reconcile()
	if n := len(f.claims()); n != 5 {
		t.Fatalf("%d claims after the repair: the pool was not refilled", n)
	}
}
