package deletioncost

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	gosync "sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/clocktest"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

var start = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

// cluster is three nodes of one pool, 4 CPU each, with pods of 1 CPU: node-a holds one, node-b
// three, node-c two. Consolidation would take node-a first, then node-c, then node-b.
type cluster struct {
	ns   string
	snap *disruptionplan.Snapshot
	pods map[string][]*corev1.Pod
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "deletioncost-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Disruption = karpv1.Disruption{ConsolidateAfter: karpv1.NewDuration(30 * time.Second),
		ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, Budgets: []karpv1.Budget{{Nodes: "10%"}}}
	c := &cluster{ns: ns.Name, pods: map[string][]*corev1.Pod{},
		snap: &disruptionplan.Snapshot{Now: start, NodePools: []disruptionplan.Pool{{NodePool: np}}}}
	for _, n := range []struct {
		name string
		pods int
	}{{"node-a", 1}, {"node-b", 3}, {"node-c", 2}} {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}}}
		nc.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue},
			{Type: karpv1.ConditionTypeConsolidatable, Status: metav1.ConditionTrue}}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name}, Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		dn := &disruptionplan.Node{NodeClaim: nc, Node: node}
		for i := range n.pods {
			p := c.createPod(t, fmt.Sprintf("%s-%d", n.name, i), n.name, true)
			dn.Pods = append(dn.Pods, p)
			c.pods[n.name] = append(c.pods[n.name], p)
		}
		c.snap.Nodes = append(c.snap.Nodes, dn)
	}
	return c
}

// createPod creates a pod bound to the node, controlled by a ReplicaSet when owned.
func (c *cluster) createPod(t *testing.T, name, node string, owned bool) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: c.ns, Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
	if owned {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: types.UID("rs-web"), Controller: new(true)}}
	}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

func (c *cluster) controller(enabled bool) *Controller {
	return &Controller{Client: namespaced{env.Client, c.ns}, Clock: clocktest.Stepping{FakeClock: clocktesting.NewFakeClock(start)}, Enabled: enabled,
		Snapshot: func(context.Context) (*disruptionplan.Snapshot, error) { return c.snap, nil }}
}

// namespaced lists only the test's namespace, so tests do not see each other's pods.
type namespaced struct {
	client.Client
	ns string
}

func (n namespaced) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	return n.Client.List(ctx, list, append(opts, client.InNamespace(n.ns))...)
}

// annotations reads the pod's deletion cost and Capstan's record from the API server.
func annotations(t *testing.T, p *corev1.Pod) (cost, record string, hasCost, hasRecord bool) {
	t.Helper()
	got := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), got); err != nil {
		t.Fatal(err)
	}
	cost, hasCost = got.Annotations[corev1.PodDeletionCost]
	record, hasRecord = got.Annotations[pods.DeletionCostRecordKey]
	return cost, record, hasCost, hasRecord
}

func sync(t *testing.T, c *Controller) int {
	t.Helper()
	n, err := c.Sync(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Pods get their node's value, ranking the nodes in consolidation order (node-a, then node-c,
// then node-b) in the consolidation band; pods no ReplicaSet controls get none; a second pass
// writes nothing.
func TestReplicaSetPodsGetTheirNodesRank(t *testing.T) {
	c := newCluster(t)
	bare := c.createPod(t, "bare", "node-a", false)
	ctl := c.controller(true)
	if n := sync(t, ctl); n != 6 {
		t.Fatalf("first pass wrote %d pods, want the 6 ReplicaSet pods", n)
	}
	want := disruptionplan.DeletionCosts(c.snap, disruptionplan.Options{})
	if !(disruptionplan.DeletionCostConsolidation <= want["node-a"] && want["node-a"] < want["node-c"] && want["node-c"] < want["node-b"] && want["node-b"] < 0) {
		t.Fatalf("ranking %v, want node-a, node-c, node-b in the consolidation band", want)
	}
	for node, ps := range c.pods {
		for _, p := range ps {
			cost, record, _, _ := annotations(t, p)
			if cost != strconv.Itoa(int(want[node])) || record != cost {
				t.Errorf("pod %s on %s: deletion cost %q, record %q; want %d for both", p.Name, node, cost, record, want[node])
			}
		}
	}
	if _, _, hasCost, hasRecord := annotations(t, bare); hasCost || hasRecord {
		t.Errorf("a pod without a ReplicaSet got a deletion cost")
	}
	if n := sync(t, ctl); n != 0 {
		t.Errorf("a second pass over the same ranking wrote %d pods", n)
	}
}

// A deletion cost Capstan did not write is never changed, and one a user changed after Capstan
// wrote it stays the user's: Capstan drops its record and leaves the value.
func TestUserValuesAreKept(t *testing.T) {
	c := newCluster(t)
	mine := c.pods["node-a"][0]
	patchAnnotations(t, mine, map[string]any{corev1.PodDeletionCost: "7"})
	ctl := c.controller(true)
	sync(t, ctl)
	if cost, _, _, hasRecord := annotations(t, mine); cost != "7" || hasRecord {
		t.Fatalf("a user's deletion cost became %q (record %t)", cost, hasRecord)
	}
	theirs := c.pods["node-b"][0]
	patchAnnotations(t, theirs, map[string]any{corev1.PodDeletionCost: "3"})
	sync(t, ctl)
	if cost, _, _, hasRecord := annotations(t, theirs); cost != "3" || hasRecord {
		t.Fatalf("a value changed by a user after Capstan: %q, record kept %t; want 3 and no record", cost, hasRecord)
	}
	if n := sync(t, ctl); n != 0 {
		t.Errorf("a later pass wrote %d pods", n)
	}
	// Turned off, Capstan takes back only its own values.
	sync(t, c.controller(false))
	for node, ps := range c.pods {
		for _, p := range ps {
			cost, _, hasCost, hasRecord := annotations(t, p)
			switch {
			case p.Name == mine.Name && cost != "7", p.Name == theirs.Name && cost != "3":
				t.Errorf("gate off: pod %s lost its user's value (now %q)", p.Name, cost)
			case p.Name != mine.Name && p.Name != theirs.Name && (hasCost || hasRecord):
				t.Errorf("gate off: pod %s on %s keeps Capstan's deletion cost %q", p.Name, node, cost)
			}
		}
	}
}

func patchAnnotations(t *testing.T, p *corev1.Pod, ann map[string]any) {
	t.Helper()
	raw := fmt.Appendf(nil, `{"metadata":{"annotations":%s}}`, mustJSON(t, ann))
	if err := env.Client.Patch(t.Context(), p.DeepCopy(), client.RawPatch(types.MergePatchType, raw)); err != nil {
		t.Fatal(err)
	}
}

// Nodes leave the ranking when they can no longer be removed: a do-not-disrupt pod keeps its
// node, and Capstan's values there are removed.
func TestValuesLeaveNodesThatCannotBeRemoved(t *testing.T) {
	c := newCluster(t)
	ctl := c.controller(true)
	sync(t, ctl)
	nodeB, _, _, _ := annotations(t, c.pods["node-b"][0])
	guard := c.pods["node-c"][0].DeepCopy()
	guard.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	for _, n := range c.snap.Nodes {
		if n.Node.Name == "node-c" {
			n.Pods = []*corev1.Pod{guard, c.pods["node-c"][1]}
		}
	}
	if n := sync(t, ctl); n != 2 {
		t.Errorf("wrote %d pods, want node-c's 2 removed and nothing else: other nodes keep their values", n)
	}
	for _, p := range c.pods["node-c"] {
		if _, _, hasCost, hasRecord := annotations(t, p); hasCost || hasRecord {
			t.Errorf("pod %s on a node that cannot be removed keeps a deletion cost", p.Name)
		}
	}
	if cost, _, _, _ := annotations(t, c.pods["node-b"][0]); cost != nodeB {
		t.Errorf("node-b's pods: %s, want their value unchanged (%s)", cost, nodeB)
	}
}

// Writes are paced: at 2 per second with a burst of 2, six writes take at least two seconds of
// the injected clock.
func TestWritesArePaced(t *testing.T) {
	c := newCluster(t)
	ctl := c.controller(true)
	ctl.WritesPerSecond = 2
	clk := ctl.Clock.(clocktest.Stepping)
	sync(t, ctl)
	if paced := clk.Since(start); paced < 2*time.Second {
		t.Errorf("six writes at 2/s took %s of the clock, want at least 2s", paced)
	}
}

// A pod changed since the cache saw it is not patched over: the optimistic lock makes the write
// conflict, and the value the user set meanwhile stays.
func TestStaleCacheNeverOverwritesAUsersValue(t *testing.T) {
	c := newCluster(t)
	stale := &corev1.Pod{}
	p := c.pods["node-a"][0]
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(p), stale); err != nil {
		t.Fatal(err)
	}
	patchAnnotations(t, p, map[string]any{corev1.PodDeletionCost: "9"})
	v := int32(-5)
	err := c.controller(true).patch(t.Context(), write{pod: stale, value: &v})
	if !apierrors.IsConflict(err) {
		t.Fatalf("patching from a stale copy: %v, want a conflict", err)
	}
	if cost, _, _, hasRecord := annotations(t, p); cost != "9" || hasRecord {
		t.Errorf("the user's value became %q (record %t)", cost, hasRecord)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A pod bound after a pass is ranked once the debounce has passed, not a period later: a scale-in
// right after a burst must find the burst's last pods ranked. The clock is stepped by the
// debounce only, so without the wake-up the pod would never get its value.
func TestBoundPodsWakeThePass(t *testing.T) {
	c := newCluster(t)
	clk, stop := startWoken(t, c.controller(true))
	// The informer's first list shows the cluster's unranked pods: they woke the controller, which
	// waits for its period (one waiter) and the debounce (a second).
	waitFor(t, "the first pass ranked node-a's pod", ranked(t, c.pods["node-a"][0]))
	waitFor(t, "the initial pods started the debounce", func() bool { return clk.Waiters() == 2 })
	clk.Step(DefaultDebounce)
	// The second pass finds nothing to write and waits for a new period beside the first.
	waitFor(t, "the second pass waits", func() bool { return clk.Waiters() == 2 })

	late := c.createPod(t, "late", "node-a", true)
	waitFor(t, "the bound pod started the debounce", func() bool { return clk.Waiters() == 3 })
	clk.Step(DefaultDebounce)
	waitFor(t, "the pod bound after the pass got a deletion cost", ranked(t, late))
	if cost, _, _, _ := annotations(t, late); cost != strconv.Itoa(int(disruptionplan.DeletionCosts(c.snap, disruptionplan.Options{})["node-a"])) {
		t.Errorf("the late pod on node-a got %s, want node-a's value %d", cost, disruptionplan.DeletionCosts(c.snap, disruptionplan.Options{})["node-a"])
	}
	if clk.Since(start) >= DefaultPeriod {
		t.Errorf("the clock moved %s, a whole period", clk.Since(start))
	}
	stop()
}

// A pod bound to a node whose claim has not initialized is left out of the pass its binding woke
// (the ranking covers initialized nodes); the claim initializing wakes the pass that ranks it,
// after the debounce, not a period later. (In a burst the kube-scheduler binds pods to a node as
// soon as it is Ready, often before its claim is seen initialized.)
func TestAClaimInitializingWakesThePass(t *testing.T) {
	c := newCluster(t)
	name := "late-" + c.ns
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}}}
	if err := env.Client.Create(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
		Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	bound := c.createPod(t, "bound-early", name, true)
	inSnap := &disruptionplan.Node{NodeClaim: claim.DeepCopy(), Node: node, Pods: []*corev1.Pod{bound}}
	var mu gosync.Mutex
	c.snap.Nodes = append(c.snap.Nodes, inSnap)

	ctl := c.controller(true)
	ctl.Snapshot = func(context.Context) (*disruptionplan.Snapshot, error) {
		mu.Lock()
		defer mu.Unlock()
		snap := *c.snap
		snap.Nodes = nil
		for _, n := range c.snap.Nodes {
			cp := *n
			cp.NodeClaim = n.NodeClaim.DeepCopy()
			snap.Nodes = append(snap.Nodes, &cp)
		}
		return &snap, nil
	}
	clk, stop := startWoken(t, ctl)
	waitFor(t, "the first pass ranked node-a's pod", ranked(t, c.pods["node-a"][0]))
	waitFor(t, "the initial pods started the debounce", func() bool { return clk.Waiters() == 2 })
	clk.Step(DefaultDebounce)
	waitFor(t, "the second pass waits", func() bool { return clk.Waiters() == 2 })
	if ranked(t, bound)() {
		t.Fatal("a pod on a node whose claim has not initialized was ranked")
	}

	mu.Lock()
	meta.SetStatusCondition(&inSnap.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, Reason: "Initialized"})
	meta.SetStatusCondition(&inSnap.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeConsolidatable, Status: metav1.ConditionTrue, Reason: "Consolidatable"})
	mu.Unlock()
	stored := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(claim), stored); err != nil {
		t.Fatal(err)
	}
	meta.SetStatusCondition(&stored.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, Reason: "Initialized"})
	if err := env.Client.Status().Update(t.Context(), stored); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the claim initializing started the debounce", func() bool { return clk.Waiters() == 3 })
	clk.Step(DefaultDebounce)
	waitFor(t, "the pod on the initialized node got a deletion cost", ranked(t, bound))
	if clk.Since(start) >= DefaultPeriod {
		t.Errorf("the clock moved %s, a whole period", clk.Since(start))
	}
	stop()
}

// startWoken starts the controller with informers on the test's API server and a fake clock at
// start, and returns the clock and a function that stops the controller and checks Start's
// error.
func startWoken(t *testing.T, ctl *Controller) (*clocktesting.FakeClock, func()) {
	t.Helper()
	informers, err := crcache.New(env.Config, crcache.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() { _ = informers.Start(ctx) }()
	clk := clocktesting.NewFakeClock(start)
	ctl.Clock, ctl.Informers = clk, informers
	done := make(chan error, 1)
	go func() { done <- ctl.Start(ctx) }()
	return clk, func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}
}

// waitFor polls cond for up to 30 s of real time (what the API server and the informers take),
// failing the test with what when it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: %s", what)
		}
	}
}

// ranked reports whether the pod has a deletion cost on the API server.
func ranked(t *testing.T, p *corev1.Pod) func() bool {
	return func() bool { _, _, has, _ := annotations(t, p); return has }
}
