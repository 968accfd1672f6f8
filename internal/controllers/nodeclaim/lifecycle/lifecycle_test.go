package lifecycle

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/nodeclaim/termination"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

type fixture struct {
	clk    *clocktesting.FakeClock
	cloud  *sim.Cloud
	joiner *sim.Joiner
	ctrl   *Controller
}

func setup(t *testing.T, class string, failures simv1alpha1.Failures) *fixture {
	t.Helper()
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: class},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large", "c5.large"}, Failures: failures}})
	sc := simtest.New(t, env.Client)
	return &fixture{clk: sc.Clock, cloud: sc.Cloud, joiner: sc.Joiner,
		ctrl: &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Recorder: events.NewFakeRecorder(100)}}
}

func newClaim(t *testing.T, name, class string, startupTaints ...corev1.Taint) *karpv1.NodeClaim {
	t.Helper()
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "default", "team": "orders"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef:  &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: class},
			Requirements:  karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}},
			Resources:     karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
			Taints:        karpv1.Taints{{Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}},
			StartupTaints: startupTaints,
		},
	}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	simtest.CleanupClaim(t, env.Client, name)
	return nc
}

func (f *fixture) reconcile(t *testing.T, name string) *karpv1.NodeClaim {
	t.Helper()
	if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	return nc
}

func conditions(nc *karpv1.NodeClaim) []string {
	var out []string
	for _, c := range nc.Status.Conditions {
		if c.Status == metav1.ConditionTrue {
			out = append(out, c.Type)
		}
	}
	return out
}

func setReady(t *testing.T, name string) {
	t.Helper()
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	orig := node.DeepCopy()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}
	if err := env.Client.Status().Patch(t.Context(), node, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

func TestLaunchRegisterInitializeReady(t *testing.T) {
	f := setup(t, "lifecycle", simv1alpha1.Failures{})
	startup := corev1.Taint{Key: "node.cilium.io/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	newClaim(t, "lifecycle-1", "lifecycle", startup)

	nc := f.reconcile(t, "lifecycle-1")
	if got := conditions(nc); !slices.Equal(got, []string{karpv1.ConditionTypeLaunched}) {
		t.Fatalf("after launch: true conditions %v", got)
	}
	if nc.Status.ProviderID == "" || nc.Labels[karpv1.InstanceTypeLabelKey] != "c5.large" || !slices.Contains(nc.Finalizers, karpv1.TerminationFinalizer) {
		t.Fatalf("launched claim: %+v", nc)
	}
	// Nothing registers before the delay.
	nc = f.reconcile(t, "lifecycle-1")
	if meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeRegistered) {
		t.Fatal("registered without a node")
	}
	f.clk.Step(3 * time.Second)
	if err := f.joiner.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	nc = f.reconcile(t, "lifecycle-1")
	if got := conditions(nc); !slices.Equal(got, []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered}) {
		t.Fatalf("after registration: %v", got)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "lifecycle-1"}, node); err != nil {
		t.Fatal(err)
	}
	if node.Labels["team"] != "orders" || node.Labels[karpv1.NodeRegisteredLabelKey] != "true" ||
		!slices.Contains(node.Finalizers, karpv1.TerminationFinalizer) || len(node.OwnerReferences) != 1 {
		t.Fatalf("node not adopted: %+v", node.ObjectMeta)
	}
	for _, tn := range node.Spec.Taints {
		if tn.Key == karpv1.UnregisteredTaintKey {
			t.Fatal("unregistered taint left on the node")
		}
	}
	// Ready, but the startup taint is still there: not initialized.
	setReady(t, "lifecycle-1")
	nc = f.reconcile(t, "lifecycle-1")
	if meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized) {
		t.Fatal("initialized with a startup taint on the node")
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "lifecycle-1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.Key == startup.Key })
	if err := env.Client.Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	nc = f.reconcile(t, "lifecycle-1")
	want := []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeReady}
	if got := conditions(nc); !slices.Equal(got, want) {
		t.Fatalf("final conditions %v, want %v in order", got, want)
	}
	if nc.Status.NodeName != "lifecycle-1" {
		t.Fatalf("status.nodeName %q", nc.Status.NodeName)
	}
}

func TestInsufficientCapacityDeletesTheClaim(t *testing.T) {
	f := setup(t, "ice", simv1alpha1.Failures{InsufficientCapacity: []simv1alpha1.OfferingSelector{{CapacityType: "on-demand"}}})
	newClaim(t, "ice-1", "ice")
	nc := f.reconcile(t, "ice-1")
	if nc.DeletionTimestamp.IsZero() {
		t.Fatal("claim not deleted after insufficient capacity")
	}
	if n := f.cloud.CreateCount("ice-1"); n != 0 {
		t.Fatalf("%d machines launched", n)
	}
}

func TestUnknownNodeClassDeletesTheClaim(t *testing.T) {
	f := setup(t, "known", simv1alpha1.Failures{})
	newClaim(t, "unknown-1", "does-not-exist")
	nc := f.reconcile(t, "unknown-1")
	if nc.DeletionTimestamp.IsZero() {
		t.Fatal("claim with an unknown NodeClass not deleted")
	}
	rec := f.ctrl.Recorder.(*events.FakeRecorder)
	select {
	case e := <-rec.Events:
		if !strings.Contains(e, "NodeClaimFailedToResolveNodeClass") {
			t.Fatalf("event %q", e)
		}
	default:
		t.Fatal("no event")
	}
}

func TestNeverRegisteringMachineIsGivenUpAfterTheTTL(t *testing.T) {
	f := setup(t, "ghost", simv1alpha1.Failures{NeverRegister: []simv1alpha1.OfferingSelector{{}}})
	newClaim(t, "ghost-1", "ghost")
	f.reconcile(t, "ghost-1")
	f.clk.Step(RegistrationTTL - time.Second)
	if err := f.joiner.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if nc := f.reconcile(t, "ghost-1"); !nc.DeletionTimestamp.IsZero() {
		t.Fatal("deleted before the TTL")
	}
	f.clk.Step(2 * time.Second)
	if nc := f.reconcile(t, "ghost-1"); nc.DeletionTimestamp.IsZero() {
		t.Fatal("not deleted after the TTL")
	}
	// Termination then gives the machine back.
	term := &termination.Controller{Client: env.Client, Cloud: f.ctrl.Cloud, Clock: f.clk, Recorder: f.ctrl.Recorder}
	if _, err := term.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "ghost-1"}}); err != nil {
		t.Fatal(err)
	}
	if n := len(f.cloud.Instances()); n != 0 {
		t.Fatalf("%d machines left after the claim of a never-registering machine was terminated", n)
	}
}

// A kubelet whose Node object is deleted registers it again, with the taints it registers with
// (the unregistered taint among them). The claim is registered already, so before this rule
// nothing lifted that taint and the node took no pod for ever (the chaos suite's crash during
// launches on AWS: a node released while its claim's status write was lost to a kill).
func TestANodeRegisteredAgainIsAdoptedAgain(t *testing.T) {
	f := setup(t, "readopt", simv1alpha1.Failures{})
	startup := corev1.Taint{Key: "node.cilium.io/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
	newClaim(t, "readopt-1", "readopt", startup)
	f.reconcile(t, "readopt-1")
	f.clk.Step(3 * time.Second)
	if err := f.joiner.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, "readopt-1")
	setReady(t, "readopt-1")
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "readopt-1"}, node); err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.Key == startup.Key })
	if err := env.Client.Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	nc := f.reconcile(t, "readopt-1")
	if !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeReady) {
		t.Fatalf("claim not ready: %v", conditions(nc))
	}

	// The Node object is deleted and the kubelet registers it again.
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "readopt-1"}, node); err != nil {
		t.Fatal(err)
	}
	providerID := node.Spec.ProviderID
	node.Finalizers = nil
	if err := env.Client.Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "readopt-1", Labels: map[string]string{corev1.LabelHostname: "readopt-1"}},
		Spec: corev1.NodeSpec{ProviderID: providerID, Taints: []corev1.Taint{
			{Key: karpv1.UnregisteredTaintKey, Effect: corev1.TaintEffectNoExecute}, startup}}}
	if err := env.Client.Create(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &corev1.Node{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: "readopt-1"}, cur) == nil {
			cur.Finalizers = nil
			_ = env.Client.Update(context.Background(), cur)
			_ = env.Client.Delete(context.Background(), cur)
		}
	})
	setReady(t, "readopt-1")

	nc = f.reconcile(t, "readopt-1")
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "readopt-1"}, node); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.Key == karpv1.UnregisteredTaintKey }) {
		t.Fatalf("the node registered again keeps the unregistered taint: %v", node.Spec.Taints)
	}
	if node.Labels["team"] != "orders" || node.Labels[karpv1.NodeRegisteredLabelKey] != "true" || node.Labels[karpv1.NodeInitializedLabelKey] != "true" ||
		!slices.Contains(node.Finalizers, karpv1.TerminationFinalizer) || len(node.OwnerReferences) != 1 {
		t.Fatalf("the node registered again is not adopted: %+v", node.ObjectMeta)
	}
	if !slices.ContainsFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.Key == "workload" }) {
		t.Fatalf("the claim's taint is not on the node registered again: %v", node.Spec.Taints)
	}
	if n := len(slices.DeleteFunc(slices.Clone(node.Spec.Taints), func(x corev1.Taint) bool { return x.Key != startup.Key })); n != 1 {
		t.Fatalf("startup taint %d times on the node, want the kubelet's one: %v", n, node.Spec.Taints)
	}
	want := []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeReady}
	if got := conditions(nc); !slices.Equal(got, want) {
		t.Fatalf("conditions %v, want %v", got, want)
	}
}
