// Package nodeclaims reads NodeClaims and Nodes the way several controllers and the decision core
// need them, without an API client: a claim in flight as the node it will be, its capacity and
// offering price, the taints and marks of disruption, conditions set on the injected clock.
// Reading and writing them through the API server is internal/claimstore's.
package nodeclaims

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// NodeReady reports whether the Node's Ready condition is True.
func NodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// SetCondition sets a condition, stamping a transition with the clock's time.
func SetCondition(nc *karpv1.NodeClaim, clk clock.PassiveClock, t string, s metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{
		Type: t, Status: s, Reason: reason, Message: msg, ObservedGeneration: nc.Generation,
		LastTransitionTime: metav1.NewTime(clk.Now()),
	})
}

// ConditionsEqual reports whether two claims have the same conditions, transition times aside.
func ConditionsEqual(a, b *karpv1.NodeClaim) bool {
	if len(a.Status.Conditions) != len(b.Status.Conditions) {
		return false
	}
	for i := range a.Status.Conditions {
		x, y := a.Status.Conditions[i], b.Status.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message {
			return false
		}
	}
	return true
}
