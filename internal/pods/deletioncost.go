package pods

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DeletionCostRecordKey is the annotation in which Capstan records the
// controller.kubernetes.io/pod-deletion-cost value it wrote on a pod. A pod's deletion cost is
// Capstan's exactly when this record is there and equals it; any other deletion cost was set by
// somebody else (the pod template, the user, another controller) and Capstan never changes it.
const DeletionCostRecordKey = "capstan.dev/pod-deletion-cost"

// DisruptionCostKey is Karpenter's annotation for a pod's eviction cost in consolidation's
// scoring (an int32); it wins over the pod's deletion cost.
const DisruptionCostKey = "karpenter.sh/disruption-cost"

// DeletionCostOwner says who set a pod's deletion cost.
type DeletionCostOwner int

// Owners of a pod's deletion cost.
const (
	// DeletionCostUnset: no deletion cost and no record; Capstan may write one.
	DeletionCostUnset DeletionCostOwner = iota
	// DeletionCostCapstan: the value is the one Capstan recorded writing.
	DeletionCostCapstan
	// DeletionCostUser: somebody else's value, never changed by Capstan.
	DeletionCostUser
	// DeletionCostTaken: Capstan's record is there but the value differs or is gone: somebody
	// changed it after Capstan wrote it. Capstan drops its record and leaves the value.
	DeletionCostTaken
)

// DeletionCostOf says who set the pod's controller.kubernetes.io/pod-deletion-cost.
func DeletionCostOf(p *corev1.Pod) DeletionCostOwner {
	v, has := p.Annotations[corev1.PodDeletionCost]
	rec, recorded := p.Annotations[DeletionCostRecordKey]
	switch {
	case recorded && has && v == rec:
		return DeletionCostCapstan
	case recorded:
		return DeletionCostTaken
	case has:
		return DeletionCostUser
	}
	return DeletionCostUnset
}

// SetDeletionCost gives the pod Capstan's deletion cost v: the value, and Capstan's record of it
// (DeletionCostRecordKey), by which DeletionCostOf tells it from a user's.
func SetDeletionCost(p *corev1.Pod, v int32) {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	s := strconv.Itoa(int(v))
	p.Annotations[corev1.PodDeletionCost] = s
	p.Annotations[DeletionCostRecordKey] = s
}

// ClearDeletionCost removes Capstan's deletion cost from the pod: the value and its record.
func ClearDeletionCost(p *corev1.Pod) {
	delete(p.Annotations, DeletionCostRecordKey)
	delete(p.Annotations, corev1.PodDeletionCost)
}

// UserEvictionCost is the eviction cost a user gave the pod, for consolidation's scoring:
// karpenter.sh/disruption-cost when set and readable, else a deletion cost that is not Capstan's
// own. Unreadable values count as none (the ReplicaSet controller refuses them too).
func UserEvictionCost(p *corev1.Pod) (int32, bool) {
	if v, ok := p.Annotations[DisruptionCostKey]; ok {
		if c, err := strconv.ParseInt(v, 10, 32); err == nil {
			return int32(c), true
		}
	}
	if o := DeletionCostOf(p); o == DeletionCostUser || o == DeletionCostTaken {
		if c, err := strconv.ParseInt(p.Annotations[corev1.PodDeletionCost], 10, 32); err == nil {
			return int32(c), true
		}
	}
	return 0, false
}

// OwnedByReplicaSet reports whether a ReplicaSet controls the pod: only the ReplicaSet controller
// reads deletion costs when it scales in.
func OwnedByReplicaSet(p *corev1.Pod) bool {
	o := metav1.GetControllerOf(p)
	return o != nil && o.Kind == "ReplicaSet"
}
