package garbagecollection

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
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
	t.Cleanup(func() { releaseClaim("kept") })
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
	// Now the claimed machine vanishes. Its claim never registered: the registration timeout,
	// not the cloud's listing, gives it up.
	if _, err := cloud.Terminate(left[0].ID); err != nil {
		t.Fatal(err)
	}
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if deleted(t, "kept") {
		t.Fatal("an unregistered claim was collected on the cloud's word")
	}
	// Registered with a Ready node: the kubelet is running, the listing is not trusted.
	markRegistered(t, "kept")
	node := readyNode(t, "kept-node", left[0].ProviderID(), corev1.ConditionTrue)
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if deleted(t, "kept") {
		t.Fatal("the claim of a Ready node was collected")
	}
	// The node stops being Ready: the machine is gone, the claim is deleted.
	node.Status.Conditions[0].Status = corev1.ConditionUnknown
	if err := env.Client.Status().Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !deleted(t, "kept") {
		t.Fatal("the NodeClaim of a vanished machine was not deleted")
	}
}

// A claim whose NodeClass kind another provider serves is never collected, whatever this cloud
// lists.
func TestOtherProvidersClaimsAreLeftAlone(t *testing.T) {
	sc := simtest.New(t, env.Client)
	gc := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock}
	other := claim("other-provider")
	other.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"}
	if err := env.Client.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), other) })
	other.Status.ProviderID = "aws:///us-east-1a/i-0123456789abcdef0"
	if err := env.Client.Status().Update(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	markRegistered(t, "other-provider")
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if deleted(t, "other-provider") {
		t.Fatal("another provider's claim was collected")
	}
}

// releaseClaim drops a test claim's finalizers so that it goes (a merge patch: an update would
// send the whole object back, and the API refuses any change to a claim's spec).
func releaseClaim(name string) {
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_ = env.Client.Patch(context.Background(), nc, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
}

func deleted(t *testing.T, name string) bool {
	t.Helper()
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		return apierrors.IsNotFound(err)
	}
	return !nc.DeletionTimestamp.IsZero()
}

func markRegistered(t *testing.T, name string) {
	t.Helper()
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue, Reason: "Registered"})
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
}

func readyNode(t *testing.T, name, providerID string, ready corev1.ConditionStatus) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{ProviderID: providerID}}
	if err := env.Client.Create(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), n) })
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready, Reason: "KubeletReady"}}
	if err := env.Client.Status().Update(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	return n
}

// finalizedNode is a Ready Node carrying Capstan's termination finalizer, as registration
// leaves it; the finalizer is dropped at the end of the test.
func finalizedNode(t *testing.T, name, providerID string) *corev1.Node {
	t.Helper()
	n := readyNode(t, name, providerID, corev1.ConditionTrue)
	n.Finalizers = []string{karpv1.TerminationFinalizer}
	if err := env.Client.Update(t.Context(), n); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &corev1.Node{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: n.Name}, cur) == nil {
			cur.Finalizers = nil
			_ = env.Client.Update(context.Background(), cur)
		}
	})
	return n
}

// A Node that registered a moment ago may be ahead of the cache's copy of its claim (the claims
// are listed first, and the caches lag separately): it is released only once it has had the
// grace window to be matched. (A 1,000-machine burst lost four live nodes to this.)
func TestFreshNodeIsNotReleasedBeforeItsClaimIsSeen(t *testing.T) {
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gc"}, Spec: simv1alpha1.SimNodeClassSpec{InstanceTypes: []string{"m5.large"}}})
	sc := simtest.New(t, env.Client)
	gc := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock}
	sc.Clock.SetTime(time.Now())
	n := finalizedNode(t, "fresh-node", "sim:///unrecorded")
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	cur := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: n.Name}, cur); err != nil || !cur.DeletionTimestamp.IsZero() {
		t.Fatalf("a node registered a moment ago was released (err %v)", err)
	}
	sc.Clock.Step(GracePeriod + time.Second)
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: n.Name}, cur); err == nil && cur.DeletionTimestamp.IsZero() {
		t.Fatal("a node without a claim past the grace window was not released")
	}
}

// A Node whose machine's NodeClaim exists but has not recorded the machine is kept past the
// grace window: Capstan killed after adopting the node and before writing the claim's status
// redoes the claim's launch and registration after its restart, which may take longer than the
// window in a burst. Released, the node was deleted under its kubelet, which registered it again
// with the unregistered taint (the chaos suite's crash during launches on AWS).
func TestANodeWhoseClaimHasNotRecordedItsMachineIsKept(t *testing.T) {
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gc"}, Spec: simv1alpha1.SimNodeClassSpec{InstanceTypes: []string{"m5.large"}}})
	sc := simtest.New(t, env.Client)
	gc := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock}
	sc.Clock.SetTime(time.Now())
	nc := claim("unrecorded")
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseClaim("unrecorded"); _ = env.Client.Delete(context.Background(), nc) })
	// The machine is launched; the claim's status (its provider ID) was never written.
	launched, err := sc.Provider.Create(t.Context(), nc.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	n := finalizedNode(t, "unrecorded-node", launched.Status.ProviderID)
	sc.Clock.Step(GracePeriod + time.Second)
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	cur := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: n.Name}, cur); err != nil || !cur.DeletionTimestamp.IsZero() {
		t.Fatalf("the node of a machine whose claim exists was released (err %v)", err)
	}
	if len(sc.Cloud.Instances()) != 1 {
		t.Fatalf("%d machines left, want the claim's one", len(sc.Cloud.Instances()))
	}
	// Once the claim is gone, the node is released.
	releaseClaim("unrecorded")
	if err := env.Client.Delete(t.Context(), nc); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err := gc.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: n.Name}, cur); err == nil && cur.DeletionTimestamp.IsZero() {
		t.Fatal("the node of a machine whose claim is gone was not released")
	}
}

// failingDelete is the cloud, except that terminating the machine of one claim name fails.
type failingDelete struct {
	cloudprovider.CloudProvider
	name string
}

func (f failingDelete) Delete(ctx context.Context, nc *karpv1.NodeClaim) error {
	if nc.Name == f.name {
		return errors.New("injected: the cloud refuses")
	}
	return f.CloudProvider.Delete(ctx, nc)
}

// One orphan the cloud will not terminate does not stop the sweep: the other orphan is
// terminated and the vanished claim deleted in the same sweep, and the sweep reports the failure.
func TestOneFailedTerminationDoesNotStopTheSweep(t *testing.T) {
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "gc"}, Spec: simv1alpha1.SimNodeClassSpec{InstanceTypes: []string{"m5.large"}}})
	sc := simtest.New(t, env.Client)
	clk, cloud, p := sc.Clock, sc.Cloud, sc.Provider
	gc := &Controller{Client: env.Client, Cloud: failingDelete{CloudProvider: p, name: "stuck"}, Clock: clk}
	for _, name := range []string{"stuck", "lost-too"} {
		if _, err := p.Create(t.Context(), claim(name)); err != nil {
			t.Fatal(err)
		}
	}
	// A registered claim whose machine vanished (its node not Ready).
	gone := claim("gone")
	gone.Finalizers = []string{karpv1.TerminationFinalizer}
	if err := env.Client.Create(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseClaim("gone") })
	gone.Status.ProviderID = "sim:///zone-a/gone-0"
	if err := env.Client.Status().Update(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	markRegistered(t, "gone")
	readyNode(t, "gone-node", gone.Status.ProviderID, corev1.ConditionUnknown)

	clk.Step(GracePeriod + time.Second)
	err := gc.Sync(t.Context())
	if err == nil || !strings.Contains(err.Error(), "injected: the cloud refuses") {
		t.Fatalf("sweep error %v, want the refused termination reported", err)
	}
	for _, m := range cloud.Instances() {
		if m.NodeClaim == "lost-too" {
			t.Error("the second orphan was not terminated: the sweep stopped at the first failure")
		}
	}
	if !deleted(t, "gone") {
		t.Error("the vanished claim was not deleted: the sweep stopped at the failed termination")
	}
}
