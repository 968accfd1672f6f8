// Package pods holds the rules Capstan's controllers share about pods: whether a DaemonSet owns
// one, and whether it still protects its node from voluntary disruption.
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
