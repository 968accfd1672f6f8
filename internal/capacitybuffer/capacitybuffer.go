// Package capacitybuffer holds SIG Autoscaling's CapacityBuffer rules, without an API client:
// how many chunks a buffer keeps room for, the mark of the virtual pods the provisioner plans and
// disruption keeps room for (virtual pods never exist in the API server: they carry
// VirtualAnnotationKey, and no event is sent to them), and the outcomes a pass writes back.
// Reading buffers and writing their status is internal/bufferstore's.
package capacitybuffer

import (
	"math"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/solver"
)

// VirtualAnnotationKey marks a virtual pod; its value is the buffer's namespace/name.
const VirtualAnnotationKey = "capstan.dev/capacity-buffer"

// IsVirtual reports whether the pod is a buffer's virtual pod.
func IsVirtual(p *corev1.Pod) bool { return p.Annotations[VirtualAnnotationKey] != "" }

// Reasons of ReadyForProvisioning.
const (
	ReasonResolved            = "Resolved"
	ReasonPodTemplateNotFound = "PodTemplateNotFound"
	ReasonScalableRefNotFound = "ScalableRefNotFound"
	ReasonResolutionFailed    = "ResolutionFailed"
	ReasonFeatureGateDisabled = "FeatureGateDisabled"
)

// Replicas is how many chunks the buffer keeps room for, by SIG Autoscaling's rules: the larger
// of replicas and percentage (of the scalable object's replicas, rounded up, at least 1 when the
// percentage is positive), bounded by how many chunks fit in limits; with neither replicas nor
// percentage, as many as fit in limits (none without limits).
func Replicas(cb *autoscalingv1beta1.CapacityBuffer, spec corev1.PodSpec, scalable *int32) int32 {
	sized := false
	var want int32
	if r := cb.Spec.Replicas; r != nil {
		sized, want = true, *r
	}
	if pct := cb.Spec.Percentage; pct != nil && scalable != nil {
		sized = true
		n := int32(math.Ceil(float64(*pct) * float64(*scalable) / 100))
		if *pct > 0 {
			n = max(n, 1)
		}
		want = max(want, n)
	}
	if len(cb.Spec.Limits) == 0 {
		return want
	}
	fit := int32(math.MaxInt32)
	req := solver.Requests([]*corev1.Pod{{Spec: spec}})
	for name, lim := range nodepools.Bounded(cb.Spec.Limits) {
		q, ok := req[name]
		if !ok || q.IsZero() {
			continue
		}
		fit = min(fit, int32(min(lim.MilliValue()/q.MilliValue(), math.MaxInt32)))
	}
	if fit == math.MaxInt32 {
		// No chunk request is limited: the limits bound nothing.
		if !sized {
			return 0
		}
		return want
	}
	if !sized {
		return fit
	}
	return min(want, fit)
}

// Outcome is where a provisioning pass found room for a buffer's chunks.
type Outcome struct {
	// Existing chunks fit on nodes that run; New ones on machines being bought; Unplaced have
	// no room (Why says the first reason).
	Existing, New, Unplaced int
	Why                     string
}

// Reasons of Provisioning.
const (
	ReasonFitsExistingCapacity = "FitsExistingCapacity"
	ReasonRequiresNewCapacity  = "RequiresNewCapacity"
	ReasonUnschedulable        = "Unschedulable"
	// ReasonNotReadyForProvisioning is Provisioning's reason while the buffer does not resolve.
	ReasonNotReadyForProvisioning = "NotReadyForProvisioning"
)

// Key is the buffer a virtual pod belongs to.
func Key(p *corev1.Pod) types.NamespacedName {
	ns, name, _ := strings.Cut(p.Annotations[VirtualAnnotationKey], "/")
	return types.NamespacedName{Namespace: ns, Name: name}
}
