package nodeclaims

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func TestUnregisteredTaintCountsOnlyWithoutALiveClaim(t *testing.T) {
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{karpv1.UnregisteredNoExecuteTaint,
		{Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}}}}
	has := func(taints []corev1.Taint) bool {
		return slices.ContainsFunc(taints, func(t corev1.Taint) bool { return t.Key == karpv1.UnregisteredTaintKey })
	}
	live := &karpv1.NodeClaim{}
	if got := SchedulingTaints(node, live); has(got) || len(got) != 1 {
		t.Errorf("with a live claim: %v, want only the workload taint (the unregistered one goes at registration)", got)
	}
	if got := SchedulingTaints(node, nil); !has(got) {
		t.Errorf("without a claim: %v, want the unregistered taint kept (nothing will remove it)", got)
	}
	deleting := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &metav1.Time{Time: time.Now()}}}
	if got := SchedulingTaints(node, deleting); !has(got) {
		t.Errorf("with a deleted claim: %v, want the unregistered taint kept", got)
	}
}

// A node planned for a later consolidation still has room the provisioner counts: the mark only
// steers the kube-scheduler among nodes with room, and must not make Capstan buy a machine.
func TestPlannedTaintDoesNotHideRoom(t *testing.T) {
	node := &corev1.Node{Spec: corev1.NodeSpec{Taints: []corev1.Taint{PlannedTaint,
		{Key: "other", Effect: corev1.TaintEffectPreferNoSchedule}}}}
	if !Planned(node) {
		t.Fatal("Planned = false for a node with the planned taint")
	}
	got := SchedulingTaints(node, &karpv1.NodeClaim{})
	if slices.ContainsFunc(got, func(t corev1.Taint) bool { return t.MatchTaint(&PlannedTaint) }) || len(got) != 1 {
		t.Errorf("scheduling taints %v, want only the other PreferNoSchedule taint", got)
	}
}
