package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
)

func TestEmptyNodeIsDeletedAfterTheValidationPeriod(t *testing.T) {
	f := newFixture(t, "empty", nil)
	f.node("empty-busy", "m5.2xlarge", "1", "1", "1", "1", "1", "1")
	f.node("empty-idle", "m5.large")
	f.ctrl.Options.ValidationPeriod = 15 * time.Second
	if wait := f.round(f.ctrl); wait != 15*time.Second {
		t.Fatalf("first round waits %s, want the validation period", wait)
	}
	if nc := f.claim("empty-idle"); nc == nil || !nc.DeletionTimestamp.IsZero() || f.tainted("empty-idle") {
		t.Fatal("the empty node was touched before the validation period")
	}
	f.clk.Step(15 * time.Second)
	f.round(f.ctrl)
	if nc := f.claim("empty-idle"); nc != nil {
		t.Fatalf("the empty node's claim is still there (deleting: %v)", !nc.DeletionTimestamp.IsZero())
	}
	if f.claim("empty-busy") == nil {
		t.Fatal("the busy node was deleted")
	}
	got := f.events()
	if !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, "DisruptionTerminating") }) {
		t.Errorf("events %v, want DisruptionTerminating", got)
	}
	if !slices.ContainsFunc(got, func(e string) bool {
		return strings.Contains(e, "DisruptionLaunching") && strings.Contains(e, "0 pod(s) evicted; Emptiness: no pods to move")
	}) {
		t.Errorf("events %v, want DisruptionLaunching saying the pods evicted and the rule", got)
	}
}

func TestValidationAbandonsACommandThatNoLongerHolds(t *testing.T) {
	f := newFixture(t, "validate", nil)
	f.node("validate-busy", "m5.2xlarge", "1", "1", "1", "1", "1", "1")
	f.node("validate-idle", "m5.large")
	f.ctrl.Options.ValidationPeriod = 15 * time.Second
	f.round(f.ctrl)
	// A pod arrives during the validation period.
	f.pod("late", "validate-idle", "500m")
	f.clk.Step(15 * time.Second)
	f.round(f.ctrl)
	if nc := f.claim("validate-idle"); nc == nil || !nc.DeletionTimestamp.IsZero() {
		t.Fatal("the node that got a pod during validation was deleted")
	}
}

func TestReplaceLaunchesFirstAndSurvivesARestart(t *testing.T) {
	f := newFixture(t, "replace", nil)
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl.Metrics = m
	// A 2xlarge with one small pod: an m5.large holds it for a quarter of the price.
	f.node("replace-big", "m5.2xlarge", "500m")
	f.round(f.ctrl)
	repl := f.replacements()
	if len(repl) != 1 {
		t.Fatalf("%d replacements, want 1", len(repl))
	}
	// Counted as Karpenter counts a disruption's replacements: by its reason, lower case.
	if got := testutil.ToFloat64(m.NodeClaimsCreated.WithLabelValues("underutilized", repl[0].Labels[karpv1.NodePoolLabelKey], "false")); got != 1 {
		t.Errorf("karpenter_nodeclaims_created_total{reason=underutilized}: %v, want 1", got)
	}
	// The replacement keeps its room for the pod it is launched for (the provisioner reads it).
	movingPod := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: f.ns, Name: "replace-big-0"}, movingPod); err != nil {
		t.Fatal(err)
	}
	if got := repl[0].Annotations[nodeclaims.ReservedPodsAnnotationKey]; got != string(movingPod.UID) {
		t.Errorf("replacement reserves %q, want the moving pod's UID %s", got, movingPod.UID)
	}
	big := f.claim("replace-big")
	st := commandOf(t, big)
	if st == nil || st.Method != disruptionplan.MethodSingleNode || !slices.Equal(st.Replacements, []string{repl[0].Name}) {
		t.Fatalf("command annotation %+v, want single-node naming %s", st, repl[0].Name)
	}
	if !f.tainted("replace-big") || !big.DeletionTimestamp.IsZero() {
		t.Fatal("the candidate must be tainted and not deleted while its replacement starts")
	}
	if repl[0].Annotations[disruptionplan.ReplacementAnnotationKey] != string(disruptionplan.MethodSingleNode) || len(repl[0].Finalizers) == 0 {
		t.Fatalf("replacement %s: annotations %v, finalizers %v; want the replacement mark and the termination finalizer",
			repl[0].Name, repl[0].Annotations, repl[0].Finalizers)
	}

	// Capstan restarts: a new controller knows nothing in memory.
	restarted := f.controller()
	f.round(restarted)
	if got := len(f.replacements()); got != 1 {
		t.Fatalf("%d replacements after the restart, want still 1", got)
	}
	if nc := f.claim("replace-big"); nc == nil || !nc.DeletionTimestamp.IsZero() {
		t.Fatal("the candidate was deleted before its replacement initialized")
	}
	f.initialize(&repl[0])
	f.round(restarted)
	if nc := f.claim("replace-big"); nc != nil && nc.DeletionTimestamp.IsZero() {
		t.Fatal("the candidate was not deleted once its replacement initialized")
	}
	if got := len(f.replacements()); got != 1 {
		t.Fatalf("%d replacements at the end, want 1", got)
	}
}

func TestRestartBeforeTheReplacementWasCreatedRollsBack(t *testing.T) {
	f := newFixture(t, "torn", nil)
	nc, _ := f.node("torn-big", "m5.2xlarge", "500m")
	// A command recorded and tainted, then the process died before creating its replacement.
	st := &commandState{ID: "abc12345", Method: disruptionplan.MethodSingleNode, Reason: karpv1.DisruptionReasonUnderutilized,
		Replacements: []string{"torn-abc12345-0"}, Started: f.clk.Now()}
	v, _ := json.Marshal(st)
	orig := nc.DeepCopy()
	nc.Annotations = map[string]string{CommandAnnotationKey: string(v)}
	if err := env.Client.Patch(t.Context(), nc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if err := f.ctrl.taint(t.Context(), "torn-big", true); err != nil {
		t.Fatal(err)
	}
	f.round(f.controller())
	after := f.claim("torn-big")
	if after == nil || !after.DeletionTimestamp.IsZero() {
		t.Fatal("the candidate was deleted without its replacement")
	}
	if f.tainted("torn-big") || commandOf(t, after) != nil {
		t.Fatal("the rolled-back candidate is still tainted or annotated")
	}
	if got := f.replacements(); len(got) != 0 {
		t.Fatalf("replacements %v were launched by the rollback", got)
	}
	if got := f.events(); !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, "DisruptionFailed") && strings.Contains(e, "is gone") }) {
		t.Errorf("events %v, want DisruptionFailed saying the replacement is gone", got)
	}
}

func TestReplacementTimeoutRollsBack(t *testing.T) {
	f := newFixture(t, "timeout", nil)
	f.node("timeout-big", "m5.2xlarge", "500m")
	f.round(f.ctrl)
	if len(f.replacements()) != 1 {
		t.Fatal("no replacement")
	}
	if f.replacements()[0].Annotations[nodeclaims.ReservedPodsAnnotationKey] == "" {
		t.Fatal("the replacement holds no room for the pods it was bought for")
	}
	f.clk.Step(DefaultReplacementTimeout + time.Second)
	f.round(f.ctrl)
	if f.tainted("timeout-big") || commandOf(t, f.claim("timeout-big")) != nil {
		t.Fatal("the candidate is still tainted or annotated after the timeout")
	}
	// The late replacement is kept, as Karpenter keeps it: as any machine, holding no room for
	// pods that are not moving, with an event that says why it is there.
	repl := f.replacements()
	if len(repl) != 1 || !repl[0].DeletionTimestamp.IsZero() {
		t.Fatalf("replacements %d (deleted: %v); want the one kept", len(repl), len(repl) == 1 && !repl[0].DeletionTimestamp.IsZero())
	}
	if v, ok := repl[0].Annotations[nodeclaims.ReservedPodsAnnotationKey]; ok {
		t.Errorf("the kept replacement still reserves room for pods %q", v)
	}
	if got := f.events(); !slices.ContainsFunc(got, func(e string) bool {
		return strings.Contains(e, "Kept: the disruption it was launched for was rolled back: replacements "+repl[0].Name+" did not initialize")
	}) {
		t.Errorf("events %v, want one on the replacement saying why it was kept", got)
	}
	// No new command during the backoff.
	f.round(f.ctrl)
	if got := f.replacements(); len(got) != 1 {
		t.Fatalf("%d replacements; a new one was launched during the backoff", len(got))
	}
}

func TestStrayTaintIsRemoved(t *testing.T) {
	f := newFixture(t, "stray", nil)
	f.node("stray-n", "m5.2xlarge", "1", "1", "1", "1", "1", "1", "1")
	if err := f.ctrl.taint(t.Context(), "stray-n", true); err != nil {
		t.Fatal(err)
	}
	f.round(f.ctrl)
	if f.tainted("stray-n") {
		t.Fatal("a disrupted taint without a command is still there")
	}
}

func TestBlockedNodeIsExplainedOnce(t *testing.T) {
	f := newFixture(t, "pdb", nil)
	f.node("pdb-big", "m5.2xlarge", "500m")
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if err := env.Client.Create(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
	// No controller-manager here: the status says what it would.
	pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, ObservedGeneration: pdb.Generation}
	if err := env.Client.Status().Update(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
	f.round(f.ctrl)
	f.round(f.ctrl)
	var blocked []string
	for _, e := range f.events() {
		if strings.Contains(e, "DisruptionBlocked") {
			blocked = append(blocked, e)
		}
	}
	// One on the NodeClaim, one on the Node, once.
	if len(blocked) != 2 || !strings.Contains(blocked[0], "pdb pdb/web allows no disruption") {
		t.Fatalf("DisruptionBlocked events %v, want two naming the PDB", blocked)
	}
	if len(f.replacements()) != 0 {
		t.Fatal("a node blocked by its PDB was disrupted")
	}
}

// A replacement whose saving is too small for the pods it moves is refused under
// WhenEmptyOrUnderutilized, and the node says so: an m5.xlarge with six small pods next to two
// full m5.2xlarge could become an m5.large, saving $0.096/h of $0.960/h (10%) for 7 of 13 units
// of the pool's disruption (54%), score 0.19 < 1/3.
func TestSavingTooSmallForItsEvictionsIsExplained(t *testing.T) {
	f := newFixture(t, "saving", nil)
	alloc := f.its["m5.2xlarge"].Allocatable()[corev1.ResourceCPU]
	half := fmt.Sprintf("%dm", alloc.MilliValue()/2)
	f.node("saving-full-a", "m5.2xlarge", half, half)
	f.node("saving-full-b", "m5.2xlarge", half, half)
	f.node("saving-small", "m5.xlarge", "100m", "100m", "100m", "100m", "100m", "100m")
	f.round(f.ctrl)
	var refused []string
	for _, e := range f.events() {
		if strings.Contains(e, "Unconsolidatable") && strings.Contains(e, "saving $0.0960/h is too small for 6 eviction(s)") {
			refused = append(refused, e)
		}
	}
	// One on the NodeClaim, one on the Node.
	if len(refused) != 2 || !strings.Contains(refused[0], "WhenEmptyOrUnderutilized: ") || !strings.Contains(refused[0], "(score 0.19 < 0.33)") {
		t.Fatalf("Unconsolidatable events %v, want two saying the saving is too small for 6 evictions", refused)
	}
	if len(f.replacements()) != 0 || f.claim("saving-small").Annotations[CommandAnnotationKey] != "" {
		t.Fatal("the small node was disrupted")
	}
	// Karpenter's WhenEmptyOrUnderutilized takes the saving.
	c := f.controller()
	c.Options.Decision.UnderutilizedK = -1
	f.round(c)
	r := f.replacements()
	if len(r) != 1 {
		t.Fatalf("%d replacements, want one with the score off", len(r))
	}
	// The claim allows only the types cheaper than the candidate.
	types := 0
	for _, req := range r[0].Spec.Requirements {
		if req.Key == karpv1.InstanceTypeLabelKey {
			types++
			if !slices.Equal(req.Values, []string{"m5.large"}) {
				t.Errorf("replacement allows %v, want m5.large alone", req.Values)
			}
		}
	}
	if types != 1 {
		t.Errorf("replacement has %d instance-type requirements, want 1", types)
	}
}

func TestDoNotDisruptNodeAnnotation(t *testing.T) {
	f := newFixture(t, "dnd", nil)
	_, node := f.node("dnd-big", "m5.2xlarge", "500m")
	orig := node.DeepCopy()
	node.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	if err := env.Client.Patch(t.Context(), node, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.round(f.ctrl)
	if len(f.replacements()) != 0 || f.tainted("dnd-big") {
		t.Fatal("a do-not-disrupt node was disrupted")
	}
}

func TestFinishedCommandIsNotRunAgainFromAStaleView(t *testing.T) {
	f := newFixture(t, "stale", nil)
	f.node("stale-busy", "m5.2xlarge", "1", "1", "1", "1", "1", "1")
	f.node("stale-idle", "m5.large")
	f.round(f.ctrl)
	if f.claim("stale-idle") != nil {
		t.Fatal("the empty node was not deleted")
	}
	var id string
	// A cache that lags shows a claim still carrying the finished command's annotation: the
	// same command must not be carried out (deleted, counted, announced) a second time.
	for k := range f.ctrl.done {
		id = k
	}
	nc, node := f.node("stale-lagging", "m5.large", "100m")
	// The node must not be chosen afresh: its deletion alone would be a good consolidation.
	origNode := node.DeepCopy()
	node.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	if err := env.Client.Patch(t.Context(), node, client.MergeFrom(origNode)); err != nil {
		t.Fatal(err)
	}
	orig := nc.DeepCopy()
	v, _ := json.Marshal(&commandState{ID: id, Method: disruptionplan.MethodEmptiness, Reason: karpv1.DisruptionReasonEmpty, Started: f.clk.Now()})
	nc.Annotations = map[string]string{CommandAnnotationKey: string(v)}
	if err := env.Client.Patch(t.Context(), nc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	f.round(f.ctrl)
	if got := f.claim("stale-lagging"); got == nil || !got.DeletionTimestamp.IsZero() {
		t.Fatal("a claim showing a finished command's annotation was deleted again")
	}
}

func TestChurnMemorySurvivesARestart(t *testing.T) {
	f := newFixture(t, "memory", nil)
	key := client.ObjectKey{Namespace: "memory", Name: MemoryConfigMapName}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}})
	})
	c := f.controller()
	c.Options.MemoryConfigMap = key
	f.node("memory-big", "m5.2xlarge", "500m")
	f.round(c)
	repl := f.replacements()
	if len(repl) != 1 {
		t.Fatalf("%d replacements, want 1", len(repl))
	}
	f.initialize(&repl[0])
	f.round(c)
	if nc := f.claim("memory-big"); nc != nil && nc.DeletionTimestamp.IsZero() {
		t.Fatal("the candidate was not deleted")
	}
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), key, cm); err != nil {
		t.Fatalf("the memory was not saved: %v", err)
	}
	if !strings.Contains(cm.Data["evictions.json"], `"Name":"memory-big-0"`) {
		t.Fatalf("saved memory %q does not name the moved pod", cm.Data["evictions.json"])
	}
	// A restarted (or newly elected) controller starts from the saved memory.
	restarted := f.controller()
	restarted.Options.MemoryConfigMap = key
	f.round(restarted)
	if len(restarted.evictions) != 1 || restarted.evictions[0].Name != "memory-big-0" || restarted.evictions[0].Owner == "" {
		t.Fatalf("restarted with evictions %+v, want the moved pod with its owner", restarted.evictions)
	}
	// Past the memory, nothing is loaded.
	f.clk.Step(2 * time.Hour)
	later := f.controller()
	later.Options.MemoryConfigMap = key
	f.round(later)
	if len(later.evictions) != 0 {
		t.Fatalf("evictions older than the memory were loaded: %+v", later.evictions)
	}
}

// With a budget of one node, the round deletes one light node and marks the nodes later rounds
// are expected to remove — the other light node and the node emptied by a scale-down — so that
// the scheduler puts the moving pods on the node that stays. A round with nothing to do clears
// the marks. (The wait for scale-downs in progress, which would hold the round back while the
// emptied node waits for emptiness, is off: this is about the marks.)
func TestPlannedNodesAreMarkedAndUnmarked(t *testing.T) {
	f := newFixture(t, "plan", func(np *karpv1.NodePool) { np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "1"}} })
	f.ctrl.Options.Decision.DisableScaleDownWait = true
	emptied, _ := f.node("plan-emptied", "m5.xlarge")
	meta.RemoveStatusCondition(&emptied.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	if err := env.Client.Status().Update(t.Context(), emptied); err != nil {
		t.Fatal(err)
	}
	f.node("plan-a", "m5.xlarge", "1")
	f.node("plan-b", "m5.xlarge", "1")
	f.node("plan-big", "m5.2xlarge", "1", "1", "1", "1", "1", "1", "500m")
	f.round(f.ctrl)
	var gone, left string
	for _, name := range []string{"plan-a", "plan-b"} {
		if nc := f.claim(name); nc == nil || !nc.DeletionTimestamp.IsZero() {
			gone = name
		} else {
			left = name
		}
	}
	if gone == "" || left == "" {
		t.Fatalf("one of the light nodes should go (budget 1): gone %q, left %q", gone, left)
	}
	for name, want := range map[string]bool{left: true, "plan-emptied": true, "plan-big": false} {
		if got := f.planned(name); got != want {
			t.Errorf("node %s planned = %v, want %v", name, got, want)
		}
	}
	// Budgets now allow nothing: no command, nothing in flight, so no plan either.
	np := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(f.pool), np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0"}}
	if err := env.Client.Update(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	f.clk.Step(time.Minute)
	f.round(f.ctrl)
	for _, name := range []string{left, "plan-emptied", "plan-big"} {
		if f.planned(name) {
			t.Errorf("node %s is still marked planned", name)
		}
	}
}

// A drift is carried out in the round that decides it, without the validation period, as
// Karpenter (which validates emptiness and consolidation only): a rollout of a large pool is not
// slowed by 15 seconds a node.
func TestDriftIsCarriedOutWithoutTheValidationPeriod(t *testing.T) {
	f := newFixture(t, "driftnow", nil)
	nc, _ := f.node("driftnow-old", "m5.large", "500m")
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue,
		Reason: "NodePoolDrifted", LastTransitionTime: metav1.Now()})
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	f.ctrl.Options.ValidationPeriod = 15 * time.Second
	f.round(f.ctrl)
	if repl := f.replacements(); len(repl) != 1 {
		t.Fatalf("%d replacements after the first round, want the drifted node's one", len(repl))
	}
	if st := commandOf(t, f.claim("driftnow-old")); st == nil || st.Method != disruptionplan.MethodDrift {
		t.Fatalf("command %+v, want a drift", st)
	}
}
