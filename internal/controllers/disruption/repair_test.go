package disruption

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// notReady patches the node's Ready condition to status, changed at the fixture clock's now.
func (f *fixture) notReady(node *corev1.Node, status corev1.ConditionStatus) {
	f.t.Helper()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(f.clk.Now())}}
	if err := env.Client.Status().Update(f.t.Context(), node); err != nil {
		f.t.Fatal(err)
	}
}

// A node patched to Ready=Unknown is left for 30 minutes of the controller's clock, then replaced
// (NodeRepair on): an empty node is deleted, with the repair rule on its events.
func TestUnreadyNodeIsRepairedAfterThirtyMinutes(t *testing.T) {
	f := newFixture(t, "repair", func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration() // only repair may act
	})
	f.ctrl.Options.Decision.NodeRepair = true
	f.node("repair-busy", "m5.2xlarge", "1", "1")
	_, sick := f.node("repair-sick", "m5.large")
	f.notReady(sick, corev1.ConditionUnknown)
	f.clk.Step(29 * time.Minute)
	f.round(f.ctrl)
	if nc := f.claim("repair-sick"); nc == nil || !nc.DeletionTimestamp.IsZero() {
		t.Fatal("repaired within the 30 minutes' toleration")
	}
	f.clk.Step(time.Minute)
	f.round(f.ctrl)
	if nc := f.claim("repair-sick"); nc != nil && nc.DeletionTimestamp.IsZero() {
		t.Fatalf("not repaired after 30 minutes Ready=Unknown; events %v", f.events())
	}
	if f.claim("repair-busy") == nil {
		t.Fatal("the healthy node was removed")
	}
	if got := f.events(); !slices.ContainsFunc(got, func(e string) bool { return strings.Contains(e, "Repair: Ready=Unknown") }) {
		t.Errorf("events %v, want the repair rule", got)
	}
}

// Three of ten nodes unhealthy: none is repaired, and an event says why.
func TestThreeOfTenUnhealthyAreNotRepaired(t *testing.T) {
	f := newFixture(t, "repair-share", func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
	})
	f.ctrl.Options.Decision.NodeRepair = true
	var nodes []*corev1.Node
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
		_, node := f.node("repair-share-"+n, "m5.large")
		nodes = append(nodes, node)
	}
	for _, n := range nodes[:3] {
		f.notReady(n, corev1.ConditionFalse)
	}
	f.clk.Step(time.Hour)
	f.round(f.ctrl)
	for _, n := range nodes[:3] {
		if nc := f.claim(n.Name); nc == nil || !nc.DeletionTimestamp.IsZero() {
			t.Fatalf("%s repaired with 3 of 10 unhealthy", n.Name)
		}
	}
	if got := f.events(); !slices.ContainsFunc(got, func(e string) bool {
		return strings.Contains(e, "NodeRepairBlocked") && strings.Contains(e, "3 of NodePool repair-share's 10 nodes are unhealthy")
	}) {
		t.Errorf("events %v, want NodeRepairBlocked saying 3 of 10", got)
	}
}
