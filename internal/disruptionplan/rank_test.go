package disruptionplan_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodeclaims"
)

// Nodes are ranked in bands: being disrupted, drifted (longest first), then the rest with the
// planned ones first and then consolidation order (least used first); nodes no voluntary method
// would remove get no value.
func TestDeletionCostsRankNodesByHowSoonTheyGo(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.pool("never", func(np *karpv1.NodePool) { np.Spec.Disruption.ConsolidateAfter = karpv1.NillableDuration{} })
	c.node("default", "full", "l", karpv1.CapacityTypeOnDemand, pods("a", 7, "1")...)
	c.node("default", "light", "l", karpv1.CapacityTypeOnDemand, pods("b", 2, "1")...)
	c.node("default", "half", "l", karpv1.CapacityTypeOnDemand, pods("c", 4, "1")...)
	planned := c.node("default", "planned", "l", karpv1.CapacityTypeOnDemand, pods("d", 6, "1")...)
	planned.Node.Spec.Taints = []corev1.Taint{nodeclaims.PlannedTaint}
	for i, name := range []string{"drift-new", "drift-old"} {
		n := c.node("default", name, "l", karpv1.CapacityTypeOnDemand, pods(name, 3, "1")...)
		meta.SetStatusCondition(&n.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue,
			Reason: "Drifted", LastTransitionTime: metav1.NewTime(t0.Add(-time.Duration(i+1) * time.Hour))})
	}
	leaving := c.node("default", "leaving", "l", karpv1.CapacityTypeOnDemand, pods("e", 3, "1")...)
	leaving.Node.Spec.Taints = []corev1.Taint{karpv1.DisruptedNoScheduleTaint}
	guarded := c.node("default", "guarded", "l", karpv1.CapacityTypeOnDemand, pods("f", 1, "1")...)
	guarded.Pods[0].Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	c.node("never", "kept", "l", karpv1.CapacityTypeOnDemand, pods("g", 1, "1")...)
	c.node("default", "empty", "l", karpv1.CapacityTypeOnDemand)

	got := disruptionplan.DeletionCosts(c.snap, disruptionplan.Options{})
	want := map[string]int32{
		"leaving":   disruptionplan.DeletionCostDisrupting,
		"drift-old": disruptionplan.DeletionCostDrifted, "drift-new": disruptionplan.DeletionCostDrifted + 1,
	}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s: %d, want %d", name, got[name], v)
		}
	}
	// The consolidation band, in order, below 0 (an unset value, after every ranked node).
	order := []string{"planned", "light", "half", "full"}
	for i, name := range order {
		v, ok := got[name]
		switch {
		case !ok || v < disruptionplan.DeletionCostConsolidation || v >= 0:
			t.Errorf("%s: %d (ranked %v), want a value of the consolidation band", name, v, ok)
		case i > 0 && v <= got[order[i-1]]:
			t.Errorf("%s: %d, not after %s's %d", name, v, order[i-1], got[order[i-1]])
		}
		want[name] = v
	}
	for _, name := range []string{"guarded", "kept", "empty"} {
		if v, ok := got[name]; ok {
			t.Errorf("%s ranked %d; no voluntary method removes it", name, v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d nodes ranked, want %d: %v", len(got), len(want), got)
	}
}

// While a scale-down is in progress, under-used nodes wait, and emptiness still acts: pods of a
// controller terminating, or a node the scale-down emptied waiting for consolidateAfter.
func TestConsolidationWaitsForScaleDownsInProgress(t *testing.T) {
	setup := func() *cluster {
		c := newCluster(t)
		c.pool("default", nil)
		c.node("default", "busy", "xl", karpv1.CapacityTypeOnDemand, pods("web", 8, "1")...)
		c.node("default", "light", "m", karpv1.CapacityTypeOnDemand, pods("api", 1, "1")...)
		return c
	}
	if d := setup().decide(disruptionplan.Options{}); d.Command == nil || !slices.Contains(names(d.Command), "light") {
		t.Fatalf("without a scale-down: command %v, want light consolidated", names(d.Command))
	}
	// Pods terminating.
	c := setup()
	del := metav1.NewTime(t0.Add(20 * time.Second))
	c.snap.Nodes[0].Pods[0].DeletionTimestamp = &del
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil || !strings.Contains(d.Settling, "1 pod(s) are terminating") {
		t.Fatalf("command %v, settling %q; want consolidation to wait for the terminating pod", names(d.Command), d.Settling)
	}
	if d := c.decide(disruptionplan.Options{DisableScaleDownWait: true}); d.Command == nil || !slices.Contains(names(d.Command), "light") {
		t.Errorf("wait disabled: command %v, want light consolidated", names(d.Command))
	}
	// Pods draining off a node being disrupted are not a scale-down.
	c = setup()
	drained := c.node("default", "drained", "m", karpv1.CapacityTypeOnDemand, pods("old", 1, "1")...)
	drained.Node.Spec.Taints = []corev1.Taint{karpv1.DisruptedNoScheduleTaint}
	drained.Pods[0].DeletionTimestamp = &del
	if d := c.decide(disruptionplan.Options{}); strings.Contains(d.Settling, "terminating") {
		t.Errorf("settling %q: a drain by a disruption command taken for a scale-down", d.Settling)
	}
	c = setup()
	c.snap.Nodes[0].Pods[0].DeletionTimestamp = &del
	// A pod stuck terminating past its deadline does not hold consolidation for ever.
	old := metav1.NewTime(t0.Add(-2 * time.Minute))
	c.snap.Nodes[0].Pods[0].DeletionTimestamp = &old
	if d := c.decide(disruptionplan.Options{}); d.Command == nil || !slices.Contains(names(d.Command), "light") {
		t.Errorf("stuck terminating pod: command %v (settling %q), want light consolidated", names(d.Command), d.Settling)
	}
	// An owner seen shrinking within the wait; scale-downs in a row hold for at most
	// MaxScaleDownHold.
	c = setup()
	c.snap.ScaleDowns = []disruptionplan.ScaleDown{{Owner: "ReplicaSet default/web", At: t0.Add(-10 * time.Second), Since: t0.Add(-10 * time.Second)}}
	if d := c.decide(disruptionplan.Options{}); d.Command != nil || !strings.Contains(d.Settling, "ReplicaSet default/web shrank at 09:59:50 UTC") {
		t.Fatalf("command %v, settling %q; want consolidation to wait after the scale-down", names(d.Command), d.Settling)
	}
	c.snap.ScaleDowns[0].At = t0.Add(-40 * time.Second)
	if d := c.decide(disruptionplan.Options{}); d.Command == nil {
		t.Errorf("40 s after the scale-down: no command (settling %q)", d.Settling)
	}
	c.snap.ScaleDowns = []disruptionplan.ScaleDown{{Owner: "ReplicaSet default/web", At: t0.Add(-5 * time.Second), Since: t0.Add(-6 * time.Minute)}}
	if d := c.decide(disruptionplan.Options{}); d.Command == nil {
		t.Errorf("scale-downs for six minutes in a row: no command (settling %q); want the hold bounded at 5 minutes", d.Settling)
	}
	// A node emptied by the scale-down, not yet consolidatable; another empty node still goes.
	c = setup()
	emptied := c.node("default", "emptied", "l", karpv1.CapacityTypeOnDemand)
	meta.RemoveStatusCondition(&emptied.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	d = c.decide(disruptionplan.Options{})
	if d.Command != nil || !strings.Contains(d.Settling, "1 emptied node(s) wait for consolidateAfter") {
		t.Fatalf("command %v, settling %q; want underutilisation to wait for emptiness", names(d.Command), d.Settling)
	}
	c.node("default", "empty", "s", karpv1.CapacityTypeOnDemand)
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{"empty"}) || d.Command.Method != disruptionplan.MethodEmptiness {
		t.Errorf("command %v; want the consolidatable empty node deleted while the scale-down settles", names(d.Command))
	}
}

// A node's value follows from its own use: a scale-in emptying one node, a node leaving or a
// full node joining changes no other node's value (while a ReplicaSet scales in, pods being
// rewritten must never tie with another node's); nodes of the same use get consecutive values.
func TestDeletionCostsOfOtherNodesStayPut(t *testing.T) {
	build := func(light int, extra bool) map[string]int32 {
		c := newCluster(t)
		c.pool("default", nil)
		c.node("default", "light", "l", karpv1.CapacityTypeOnDemand, pods("a", light, "1")...)
		c.node("default", "half", "l", karpv1.CapacityTypeOnDemand, pods("b", 4, "1")...)
		c.node("default", "full-1", "l", karpv1.CapacityTypeOnDemand, pods("c", 7, "1")...)
		c.node("default", "full-2", "l", karpv1.CapacityTypeOnDemand, pods("d", 7, "1")...)
		if extra {
			// The newest node, named to sort first.
			n := c.node("default", "full-0", "l", karpv1.CapacityTypeOnDemand, pods("e", 7, "1")...)
			n.NodeClaim.CreationTimestamp = metav1.NewTime(t0.Add(-time.Minute))
		}
		return disruptionplan.DeletionCosts(c.snap, disruptionplan.Options{})
	}
	before := build(3, false)
	if before["full-1"]+1 != before["full-2"] {
		t.Errorf("full-1 %d, full-2 %d: want consecutive values for nodes of the same use", before["full-1"], before["full-2"])
	}
	for _, tc := range []struct {
		name  string
		after map[string]int32
		moved string
	}{
		{"light thinned", build(1, false), "light"},
		{"light emptied", build(0, false), "light"},
		{"a full node joins", build(3, true), "full-0"},
	} {
		for node, v := range before {
			if node == tc.moved {
				continue
			}
			if tc.after[node] != v {
				t.Errorf("%s: %s went from %d to %d", tc.name, node, v, tc.after[node])
			}
		}
	}
	if v := build(1, false)["light"]; v >= before["light"] {
		t.Errorf("light with 1 pod: %d, want below its %d with 3", v, before["light"])
	}
}
