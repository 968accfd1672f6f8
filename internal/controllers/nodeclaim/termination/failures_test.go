package termination

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/nodeclaims"
)

func deleteClaim(t *testing.T, name string) {
	t.Helper()
	if err := env.Client.Delete(t.Context(), &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// A DaemonSet pod that tolerates every taint is not evicted (it would come straight back), and
// does not hold the drain.
func TestDrainLeavesPodsThatTolerateTheDisruptedTaint(t *testing.T) {
	const name = "tolerate-all"
	f := readyClaim(t, name, time.Hour)
	boundPod(t, "ta-app", name, nil)
	ds := boundPodWith(t, "ta-proxy", name, func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "proxy", UID: "proxy-uid"}}
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	})
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ds, client.GracePeriodSeconds(0)) })
	deleteClaim(t, name)
	f.reconcile(t, name)
	if left := kubelet(t, name); len(left) != 1 || left[0] != "ta-proxy" {
		t.Fatalf("after the first round, want only ta-proxy left, got %v", left)
	}
	f.reconcile(t, name)
	got := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ds), got); err != nil || got.DeletionTimestamp != nil {
		t.Fatalf("the pod tolerating karpenter.sh/disrupted was evicted (get: %v)", err)
	}
	f.reconcile(t, name)
	wantGone(t, f, name)
}

// A machine that already vanished lets termination skip the drain, even of protected pods.
func TestVanishedMachineSkipsTheDrain(t *testing.T) {
	const name = "vanished"
	f := readyClaim(t, name, time.Hour)
	boundPod(t, "vanished-pinned", name, map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"})
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vanished-pinned", Namespace: "default"}}, client.GracePeriodSeconds(0))
	})
	for _, inst := range f.cloud.Instances() {
		if _, err := f.cloud.Terminate(inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	deleteClaim(t, name)
	f.reconcile(t, name)
	wantGone(t, f, name)
}

// A pod stuck terminating (its kubelet is gone) holds the drain only until a minute past its
// grace period.
func TestPodStuckTerminatingDoesNotHoldTheDrainForever(t *testing.T) {
	const name = "stuck"
	f := readyClaim(t, name, time.Hour)
	p := boundPod(t, "stuck-pod", name, nil)
	orig := p.DeepCopy()
	p.Finalizers = []string{"example.com/hold"}
	if err := env.Client.Patch(t.Context(), p, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cur := &corev1.Pod{}
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(p), cur); err == nil {
			o := cur.DeepCopy()
			cur.Finalizers = nil
			_ = env.Client.Patch(context.Background(), cur, client.MergeFrom(o))
		}
	})
	if err := env.Client.Delete(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	deleteClaim(t, name)
	f.reconcile(t, name)
	if s := condition(t, name, karpv1.ConditionTypeDrained); s != metav1.ConditionFalse {
		t.Fatalf("Drained = %q while a pod is terminating within its grace period", s)
	}
	f.clk.Step(3 * time.Minute)
	f.reconcile(t, name)
	f.reconcile(t, name)
	if n := f.cloud.Instances(); len(n) != 0 {
		t.Fatalf("a pod stuck terminating held the drain: %d instance(s) left", len(n))
	}
}

// A deleted claim of another provider's NodeClass kind keeps its finalizer: its machine is not
// Capstan's to terminate.
func TestOtherProvidersClaimKeepsItsFinalizer(t *testing.T) {
	f := readyClaim(t, "term-own", time.Hour)
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "term-foreign", Finalizers: []string{karpv1.TerminationFinalizer}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			Requirements: karpv1.Requirements{},
		},
	}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := &karpv1.NodeClaim{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: nc.Name}, got) == nil {
			got.Finalizers = nil
			_ = env.Client.Update(context.Background(), got)
		}
	})
	deleteClaim(t, nc.Name)
	f.reconcile(t, nc.Name)
	got := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: nc.Name}, got); err != nil {
		t.Fatalf("another provider's claim is gone: %v", err)
	}
	if len(got.Finalizers) != 1 {
		t.Fatalf("finalizers %v, want the termination finalizer kept", got.Finalizers)
	}
	if n := len(f.cloud.Instances()); n != 1 {
		t.Fatalf("%d machines, want only term-own's", n)
	}
}

// The machine is terminated only once its node's volumes are detached, or when the
// terminationGracePeriod runs out.
func TestTerminationWaitsForVolumeDetachment(t *testing.T) {
	for _, tc := range []struct {
		name   string
		detach bool
	}{{"detached", true}, {"grace-elapsed", false}} {
		t.Run(tc.name, func(t *testing.T) {
			name := "volumes-" + tc.name
			f := readyClaim(t, name, time.Hour)
			pv := name + "-pv"
			va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name + "-va"}, Spec: storagev1.VolumeAttachmentSpec{
				Attacher: "ebs.csi.aws.com", NodeName: name, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}}}
			if err := env.Client.Create(t.Context(), va); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), va) })
			deleteClaim(t, name)
			f.reconcile(t, name)
			if got := condition(t, name, karpv1.ConditionTypeVolumesDetached); got != metav1.ConditionFalse {
				t.Fatalf("VolumesDetached %q while an attachment is left, want False", got)
			}
			if n := len(f.cloud.Instances()); n != 1 {
				t.Fatal("the machine was terminated with a volume attached")
			}
			if tc.detach {
				if err := env.Client.Delete(t.Context(), va); err != nil {
					t.Fatal(err)
				}
			} else {
				f.clk.Step(time.Hour + time.Second)
			}
			f.reconcile(t, name)
			wantGone(t, f, name)
		})
	}
}

// staleNodes answers Gets of one Node with a copy taken earlier, as an informer cache that has not
// seen the latest writes.
type staleNodes struct {
	client.Client
	stale *corev1.Node
}

func (c staleNodes) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if n, ok := obj.(*corev1.Node); ok && key.Name == c.stale.Name {
		c.stale.DeepCopyInto(n)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// The node's termination finalizer is removed with a write locked on the version read: from a
// stale read, a finalizer another writer added since is never dropped, and the node is deleted
// with that finalizer still holding it.
func TestStaleReadKeepsAnotherWritersNodeFinalizer(t *testing.T) {
	const name, other = "node-finalizers", "example.com/keep"
	f := readyClaim(t, name, time.Hour)
	// The node as the controller last saw it: tainted, its machine gone.
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	tainted := client.MergeFrom(node.DeepCopy())
	node.Spec.Taints = append(node.Spec.Taints, karpv1.DisruptedNoScheduleTaint)
	if err := env.Client.Patch(t.Context(), node, tainted); err != nil {
		t.Fatal(err)
	}
	for _, inst := range f.cloud.Instances() {
		if _, err := f.cloud.Terminate(inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	stale := node.DeepCopy()
	holdNode(t, name, other)
	deleteClaim(t, name)
	f.ctrl.Client = staleNodes{Client: env.Client, stale: stale}
	f.reconcile(t, name)
	f.ctrl.Client = env.Client
	f.reconcile(t, name)
	got := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, got); err != nil {
		t.Fatalf("the node is gone; another writer's finalizer should hold it: %v", err)
	}
	if !slices.Equal(got.Finalizers, []string{other}) || got.DeletionTimestamp.IsZero() {
		t.Fatalf("node finalizers %v (deleting: %v), want only %s, and the node deleting", got.Finalizers, !got.DeletionTimestamp.IsZero(), other)
	}
}

// holdNode adds another writer's finalizer to the Node, and returns what removes it again (also
// run at the test's end).
func holdNode(t *testing.T, name, finalizer string) (release func()) {
	t.Helper()
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	patch := client.MergeFrom(node.DeepCopy())
	controllerutil.AddFinalizer(node, finalizer)
	if err := env.Client.Patch(t.Context(), node, patch); err != nil {
		t.Fatal(err)
	}
	release = func() {
		n := &corev1.Node{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: name}, n) == nil {
			p := client.MergeFrom(n.DeepCopy())
			controllerutil.RemoveFinalizer(n, finalizer)
			_ = env.Client.Patch(context.Background(), n, p)
		}
	}
	t.Cleanup(release)
	return release
}

// A NodeClaim forged with another claim's machine as its provider ID is refused before anything
// is done: the machine's node is not tainted or drained, the machine is not terminated, and the
// forged claim stays with an event and a condition saying why.
func TestForgedClaimDoesNotDrainOrTerminateAnothersMachine(t *testing.T) {
	const victim, forger = "victim", "forger"
	f := readyClaim(t, victim, time.Hour)
	boundPod(t, "victim-pod", victim, nil)
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "victim-pod", Namespace: "default"}}, client.GracePeriodSeconds(0))
	})
	real := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: victim}, real); err != nil {
		t.Fatal(err)
	}
	forged := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: forger, Finalizers: []string{karpv1.TerminationFinalizer}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: real.Spec.NodeClassRef, Requirements: real.Spec.Requirements}}
	if err := env.Client.Create(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	simtest.CleanupClaim(t, env.Client, forger)
	forged.Status.ProviderID = real.Status.ProviderID
	if err := env.Client.Status().Update(t.Context(), forged); err != nil {
		t.Fatal(err)
	}
	deleteClaim(t, forger)
	if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: forger}}); !cloudprovider.IsNotOwned(err) {
		t.Fatalf("reconcile: %v, want NotOwned", err)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: victim}, node); err != nil {
		t.Fatal(err)
	}
	if nodeclaims.Disrupted(node) || len(f.cloud.Instances()) != 1 {
		t.Fatalf("node taints %v, %d machines: the victim's node was tainted or its machine terminated", node.Spec.Taints, len(f.cloud.Instances()))
	}
	if left := kubelet(t, victim); len(left) != 1 {
		t.Errorf("pods left on the victim's node %v: one was evicted", left)
	}
	if c := condition(t, forger, karpv1.ConditionTypeInstanceTerminating); c != metav1.ConditionFalse {
		t.Errorf("InstanceTerminating %q, want False (InstanceNotOwned)", c)
	}
	found := false
	for len(f.rec.Events) > 0 {
		found = found || strings.Contains(<-f.rec.Events, "InstanceNotOwned")
	}
	if !found {
		t.Error("no InstanceNotOwned event")
	}
}

// firstReadClaims answers every Get of one NodeClaim with the copy its first Get read, as an
// informer cache that has not seen the controller's own writes since.
type firstReadClaims struct {
	client.Client
	name  string
	first *karpv1.NodeClaim
}

func (c *firstReadClaims) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	nc, ok := obj.(*karpv1.NodeClaim)
	if !ok || key.Name != c.name {
		return c.Client.Get(ctx, key, obj, opts...)
	}
	if c.first == nil {
		c.first = &karpv1.NodeClaim{}
		if err := c.Client.Get(ctx, key, c.first, opts...); err != nil {
			c.first = nil
			return err
		}
	}
	c.first.DeepCopyInto(nc)
	return nil
}

// The finalizer is removed in the pass that writes the claim's last conditions, even when the
// cache has not seen that write: the removal is locked on the claim as the server wrote it, so
// it neither fails with a conflict (logged as a reconciler error on every termination) nor waits
// for a retry.
func TestFinalizerRemovedPastACacheThatLagsTheStatusWrite(t *testing.T) {
	const name = "lagging-cache"
	f := readyClaim(t, name, time.Hour)
	for _, inst := range f.cloud.Instances() {
		if _, err := f.cloud.Terminate(inst.ID); err != nil {
			t.Fatal(err)
		}
	}
	deleteClaim(t, name)
	f.ctrl.Client = &firstReadClaims{Client: env.Client, name: name}
	res, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
	f.ctrl.Client = env.Client
	if err != nil || res.RequeueAfter > 0 {
		t.Fatalf("reconcile: %v (requeue after %s); want the claim released in this pass", err, res.RequeueAfter)
	}
	wantGone(t, f, name)
}

// A node that changed since the cache read it (its status, another writer's labels) is tainted
// in a later pass: the conflicting taint is retried shortly, not returned as an error.
func TestTaintConflictIsRetriedNotAnError(t *testing.T) {
	const name = "taint-conflict"
	f := readyClaim(t, name, time.Hour)
	p := boundPod(t, "taint-conflict-app", name, nil)
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	stale := node.DeepCopy()
	patch := client.MergeFrom(node.DeepCopy())
	node.Labels["example.com/changed"] = "true"
	if err := env.Client.Patch(t.Context(), node, patch); err != nil {
		t.Fatal(err)
	}
	deleteClaim(t, name)
	f.ctrl.Client = staleNodes{Client: env.Client, stale: stale}
	res, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}})
	f.ctrl.Client = env.Client
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("reconcile from a stale node: %v (requeue after %s); want a retry without an error", err, res.RequeueAfter)
	}
	f.reconcile(t, name)
	got := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, got); err != nil {
		t.Fatal(err)
	}
	if !nodeclaims.Disrupted(got) || got.Labels["example.com/changed"] != "true" {
		t.Fatalf("after the retry: tainted %v, the other writer's label %q", nodeclaims.Disrupted(got), got.Labels["example.com/changed"])
	}
}

// The drain goes in the kubelet's graceful-shutdown order, each wave only once the one before is
// gone: ordinary pods, then DaemonSet pods, then system-critical pods, then system-critical
// DaemonSet pods (a node-critical agent outlives the workloads it serves).
func TestDrainOrderPutsDaemonSetsBeforeCriticalPods(t *testing.T) {
	const name = "drain-order"
	f := readyClaim(t, name, time.Hour)
	daemon := func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: p.Name, UID: types.UID("uid-" + p.Name)}}
	}
	critical := func(class string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Spec.PriorityClassName = class }
	}
	boundPod(t, "order-app", name, nil)
	boundPodWith(t, "order-agent", name, daemon)
	boundPodWith(t, "order-dns", name, critical("system-cluster-critical"))
	boundPodWith(t, "order-csi", name, critical("system-node-critical"))
	boundPodWith(t, "order-cni", name, func(p *corev1.Pod) { daemon(p); critical("system-node-critical")(p) })
	deleteClaim(t, name)
	waves := [][]string{
		{"order-agent", "order-cni", "order-csi", "order-dns"},
		{"order-cni", "order-csi", "order-dns"},
		{"order-cni"},
		nil,
	}
	for i, want := range waves {
		// A second pass before the kubelet acts must not start the next wave.
		f.reconcile(t, name)
		f.reconcile(t, name)
		left := kubelet(t, name)
		slices.Sort(left)
		if !slices.Equal(left, want) {
			t.Fatalf("after wave %d, want %v left, got %v", i+1, want, left)
		}
	}
	f.reconcile(t, name)
	wantGone(t, f, name)
}

// A Node that another writer's finalizer holds keeps its NodeClaim: the claim goes only once the
// Node is gone, so that a pool's count of claims never misses a Node (Karpenter's at-limit static
// pool specs hold the Node so and expect no replacement before it is gone).
func TestClaimStaysUntilItsNodeIsGone(t *testing.T) {
	const name, other = "held-node", "example.com/hold"
	f := readyClaim(t, name, time.Hour)
	release := holdNode(t, name, other)
	deleteClaim(t, name)
	for range 4 {
		f.reconcile(t, name)
		f.clk.Step(time.Minute)
	}
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		t.Fatalf("the claim is gone while its node is held: %v", err)
	}
	got := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, got); err != nil || got.DeletionTimestamp.IsZero() {
		t.Fatalf("the node: %v, deleting %v; want it deleting, held by %s", err, got.GetDeletionTimestamp(), other)
	}
	if len(f.cloud.Instances()) != 0 {
		t.Fatalf("machines %v, want the claim's terminated", f.cloud.Instances())
	}
	release()
	f.reconcile(t, name)
	wantGone(t, f, name)
}
