// Package pods holds the rules Capstan's controllers share about pods: whether a DaemonSet owns
// one, whether it would move off a disrupted node, and whether it still protects its node from
// voluntary disruption.
package pods

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// OwnedByDaemonSet reports whether a DaemonSet owns the pod.
func OwnedByDaemonSet(p *corev1.Pod) bool {
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" {
			return true
		}
	}
	return false
}

// Reschedulable reports whether the pod would have to move off a disrupted node: not a mirror or
// DaemonSet pod, not finished, not already terminating.
func Reschedulable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed &&
		p.DeletionTimestamp.IsZero() && !OwnedByDaemonSet(p)
}

// DoNotDisrupt reports whether the pod's karpenter.sh/do-not-disrupt annotation protects it at
// now: "true" always; a duration ("5m", "2h") until that long after the pod started (its creation
// when it has not started); "false" or no annotation never. Any other value protects it: a value
// Capstan cannot read is taken as the protection the user most likely meant.
func DoNotDisrupt(p *corev1.Pod, now time.Time) bool {
	v, ok := p.Annotations[karpv1.DoNotDisruptAnnotationKey]
	if !ok || v == "false" {
		return false
	}
	if v == "true" {
		return true
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return true
	}
	start := p.CreationTimestamp.Time
	if p.Status.StartTime != nil {
		start = p.Status.StartTime.Time
	}
	return now.Before(start.Add(d))
}

// HasDRARequirements reports whether the pod asks for Dynamic Resource Allocation devices:
// resource claims on the pod or on any of its containers. Capstan does not simulate DRA devices:
// such pods are left to the kube-scheduler, as Karpenter v1.15 leaves them with its default
// IGNORE_DRA_REQUESTS=true.
func HasDRARequirements(p *corev1.Pod) bool {
	if len(p.Spec.ResourceClaims) > 0 {
		return true
	}
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if len(cs[i].Resources.Claims) > 0 {
				return true
			}
		}
	}
	return false
}
