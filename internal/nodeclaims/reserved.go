package nodeclaims

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// ReservedPodsAnnotationKey lists, comma-separated, the UIDs of the pods a disruption command
// moves onto the NodeClaim it launched as a replacement. Until those pods are evicted (a
// ReplicaSet's pod comes back with a new UID, pending), the provisioner counts them on the
// replacement, so that the room the command launched it for is not promised to other pending
// pods meanwhile and the moving pods do not need a second machine.
const ReservedPodsAnnotationKey = "capstan.dev/reserved-pods"

// ReservePods records the pods on the replacement claim.
func ReservePods(nc *karpv1.NodeClaim, pods []*corev1.Pod) {
	if len(pods) == 0 {
		return
	}
	uids := make([]string, len(pods))
	for i, p := range pods {
		uids[i] = string(p.UID)
	}
	if nc.Annotations == nil {
		nc.Annotations = map[string]string{}
	}
	nc.Annotations[ReservedPodsAnnotationKey] = strings.Join(uids, ",")
}

// ReservedPods returns the pods reserved on the claim that still run elsewhere: of the bound pods
// by UID, those listed in its annotation and bound to another node than the claim's.
func ReservedPods(nc *karpv1.NodeClaim, bound map[types.UID]*corev1.Pod) []*corev1.Pod {
	var out []*corev1.Pod
	for _, uid := range ReservedUIDs(nc) {
		if p := bound[uid]; p != nil && (nc.Status.NodeName == "" || p.Spec.NodeName != nc.Status.NodeName) {
			out = append(out, p)
		}
	}
	return out
}

// ReservedUIDs are the UIDs the claim's ReservedPodsAnnotationKey lists.
func ReservedUIDs(nc *karpv1.NodeClaim) []types.UID {
	v := nc.Annotations[ReservedPodsAnnotationKey]
	if v == "" {
		return nil
	}
	var out []types.UID
	for uid := range strings.SplitSeq(v, ",") {
		out = append(out, types.UID(uid))
	}
	return out
}
