package planning

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/pods"
)

// Going are the nodes going away, by name: the Node is being deleted, or its NodeClaim is (a
// deleted or expired claim, an interrupted machine, a disruption candidate once its replacements
// are up). Reserved are the UIDs of the pods a disruption command moves onto a replacement it
// launched (nodeclaims.ReservedPodsAnnotationKey): the replacement counts them already.
type Going struct {
	Nodes    map[string]bool
	Reserved map[types.UID]bool
}

// GoingAway reads which nodes are going away from the cluster's Nodes and NodeClaims.
func GoingAway(nodes []corev1.Node, claims []karpv1.NodeClaim) Going {
	g := Going{Nodes: map[string]bool{}, Reserved: map[types.UID]bool{}}
	deleting := map[string]bool{}
	for i := range claims {
		nc := &claims[i]
		if !nc.DeletionTimestamp.IsZero() {
			if nc.Status.ProviderID != "" {
				deleting[nc.Status.ProviderID] = true
			}
			continue
		}
		for _, uid := range nodeclaims.ReservedUIDs(nc) {
			g.Reserved[uid] = true
		}
	}
	for i := range nodes {
		n := &nodes[i]
		if !n.DeletionTimestamp.IsZero() || n.Spec.ProviderID != "" && deleting[n.Spec.ProviderID] {
			g.Nodes[n.Name] = true
		}
	}
	return g
}

// TakeLeaving removes from bound, and returns, the pods of the nodes going away that will need a
// place elsewhere once they are evicted or their node is gone: those a controller recreates (a
// pod nobody owns does not come back), not a DaemonSet's or a mirror pod, not finished or
// terminating (a terminating pod's replacement is pending itself, and is planned as such), and not
// reserved on a disruption's replacement. Planned with the pending pods, they get their machines
// while their node drains, not after each eviction; taken out of their node's pods, they are not
// counted there too (the node takes no pod, its room is no room).
func (g Going) TakeLeaving(bound map[string][]*corev1.Pod) []*corev1.Pod {
	var leaving []*corev1.Pod
	for name := range g.Nodes {
		on := bound[name]
		if len(on) == 0 {
			continue
		}
		stay := make([]*corev1.Pod, 0, len(on))
		for _, p := range on {
			if Leaves(p, g.Reserved) {
				leaving = append(leaving, p)
				continue
			}
			stay = append(stay, p)
		}
		bound[name] = stay
	}
	return leaving
}

// Leaves reports whether a pod of a node going away needs a place elsewhere (TakeLeaving).
func Leaves(p *corev1.Pod, reserved map[types.UID]bool) bool {
	return pods.Reschedulable(p) && metav1.GetControllerOf(p) != nil && !reserved[p.UID]
}
