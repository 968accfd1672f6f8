// Package provreq holds the rules of SIG Autoscaling's ProvisioningRequest, without an API
// client: the pods a request stands for, the claims bought for it and how long they are kept for
// its pods (booked), and which pods consume it. Reading requests and writing their status is
// the provisioningrequest controller's.
package provreq

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// BookingTime is how long a provisioned request's capacity is kept for its pods (Cluster
// Autoscaler's 10 minutes), unless they all bound sooner (Consumed): its machines are not
// consolidated, and no other pending pod is planned onto them.
const BookingTime = 10 * time.Minute

// Labels and annotations of the NodeClaims bought for a request.
const (
	// RequestLabelKey is the request's UID, on each claim of its current attempt.
	RequestLabelKey = "capstan.dev/provisioning-request-uid"
	// RequestAnnotationKey is the request's namespace/name.
	RequestAnnotationKey = "capstan.dev/provisioning-request"
	// ClaimsAnnotationKey is how many claims the attempt bought: one gone before all launched
	// undoes the attempt.
	ClaimsAnnotationKey = "capstan.dev/provisioning-request-claims"
	// BookedUntilAnnotationKey is when the claim stops being kept for the request's pods
	// (RFC 3339).
	BookedUntilAnnotationKey = "capstan.dev/booked-until"
)

// Reasons of the conditions Capstan writes.
const (
	ReasonAccepted          = "Accepted"
	ReasonCapacityIsFound   = "CapacityIsFound"
	ReasonCapacityNotFound  = "CapacityIsNotFound"
	ReasonProvisioning      = "Provisioning"
	ReasonProvisioned       = "Provisioned"
	ReasonLaunchFailed      = "LaunchFailed"
	ReasonPodTemplate       = "PodTemplateNotFound"
	ReasonVolumesNotReady   = "VolumesNotReady"
	ReasonBookingExpired    = "BookingExpired"
	ReasonValidUntilExpired = "ValidUntilExpired"
	ReasonInvalidParameters = "InvalidParameters"
)

// Supported reports whether Capstan answers the request's class.
func Supported(pr *autoscalingv1.ProvisioningRequest) bool {
	switch pr.Spec.ProvisioningClassName {
	case autoscalingv1.ClassCheckCapacity, autoscalingv1.ClassBestEffortAtomicScaleUp:
		return true
	}
	return false
}

// Done reports whether the request needs nothing more: it failed, its booking expired, or its
// capacity was revoked.
func Done(pr *autoscalingv1.ProvisioningRequest) bool {
	switch State(pr) {
	case StateFailed, StateBookingExpired, StateCapacityRevoked:
		return true
	}
	return false
}

// BookedUntil is when a provisioned request's booking ends (zero when it is not provisioned).
func BookedUntil(pr *autoscalingv1.ProvisioningRequest) time.Time {
	c := meta.FindStatusCondition(pr.Status.Conditions, autoscalingv1.ConditionProvisioned)
	if c == nil || c.Status != metav1.ConditionTrue {
		return time.Time{}
	}
	return c.LastTransitionTime.Add(BookingTime)
}

// ValidUntil is when a best-effort atomic request stops being tried (its ValidUntilSeconds
// parameter after its creation); zero for none. A value that is no whole number of seconds is an
// error naming it.
func ValidUntil(pr *autoscalingv1.ProvisioningRequest) (time.Time, error) {
	v, ok := pr.Spec.Parameters[autoscalingv1.ParameterValidUntilSeconds]
	if !ok {
		return time.Time{}, nil
	}
	s, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("parameter %s: %q is not a number of seconds", autoscalingv1.ParameterValidUntilSeconds, v)
	}
	return pr.CreationTimestamp.Add(time.Duration(s) * time.Second), nil
}

// Pods are the pods the request stands for, made from its PodTemplates (by name): count pods of
// each set, pending, named after the request. A template missing is an error naming it.
func Pods(pr *autoscalingv1.ProvisioningRequest, templates map[string]*corev1.PodTemplate) ([]*corev1.Pod, error) {
	var out []*corev1.Pod
	for si, set := range pr.Spec.PodSets {
		t, ok := templates[set.PodTemplateRef.Name]
		if !ok {
			return nil, fmt.Errorf("spec.podSets[%d].podTemplateRef: PodTemplate %s/%s not found", si, pr.Namespace, set.PodTemplateRef.Name)
		}
		for i := range set.Count {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-%d-%d", pr.Name, si, i), Namespace: pr.Namespace,
				UID:    types.UID(fmt.Sprintf("provisioningrequest/%s/%d/%d", pr.UID, si, i)),
				Labels: t.Template.Labels,
			}, Spec: *t.Template.Spec.DeepCopy()}
			p.Status.Phase = corev1.PodPending
			out = append(out, p)
		}
	}
	return out, nil
}

// Consumes returns the request (of the pod's namespace) the pod consumes, if any.
func Consumes(p *corev1.Pod) (types.NamespacedName, bool) {
	name := p.Annotations[autoscalingv1.ConsumeAnnotationKey]
	if name == "" {
		name = p.Annotations[autoscalingv1.LegacyConsumeAnnotationKey]
	}
	if name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: p.Namespace, Name: name}, true
}

// Count is how many pods the request stands for.
func Count(pr *autoscalingv1.ProvisioningRequest) int {
	n := 0
	for _, set := range pr.Spec.PodSets {
		n += int(set.Count)
	}
	return n
}

// Consumed reports whether as many pods as the request stands for consume it and are bound to a
// node (none being deleted): its booking has served its purpose, and its room may go to others.
func Consumed(pr *autoscalingv1.ProvisioningRequest, pods []corev1.Pod) bool {
	bound := 0
	for i := range pods {
		p := &pods[i]
		if req, ok := Consumes(p); ok && req.Namespace == pr.Namespace && req.Name == pr.Name && p.Spec.NodeName != "" && p.DeletionTimestamp == nil {
			bound++
		}
	}
	return bound >= Count(pr)
}

// Booked reports whether the claim is kept for a request's pods at now, and for which request.
func Booked(nc *karpv1.NodeClaim, now time.Time) (types.NamespacedName, bool) {
	v := nc.Annotations[BookedUntilAnnotationKey]
	if v == "" {
		return types.NamespacedName{}, false
	}
	until, err := time.Parse(time.RFC3339, v)
	if err != nil || !now.Before(until) {
		return types.NamespacedName{}, false
	}
	ns, name, _ := strings.Cut(nc.Annotations[RequestAnnotationKey], "/")
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// States of a request, as metrics count them.
const (
	StateWaiting         = "waiting"
	StateProvisioning    = "provisioning"
	StateProvisioned     = "provisioned"
	StateFailed          = "failed"
	StateBookingExpired  = "booking_expired"
	StateCapacityRevoked = "capacity_revoked"
)

// State is where the request stands: failed, its booking expired or its capacity revoked (the
// ends), provisioned, machines launching for it, or waiting (for capacity, or for an answer).
func State(pr *autoscalingv1.ProvisioningRequest) string {
	switch {
	case meta.IsStatusConditionTrue(pr.Status.Conditions, autoscalingv1.ConditionFailed):
		return StateFailed
	case meta.IsStatusConditionTrue(pr.Status.Conditions, autoscalingv1.ConditionCapacityRevoked):
		return StateCapacityRevoked
	case meta.IsStatusConditionTrue(pr.Status.Conditions, autoscalingv1.ConditionBookingExpired):
		return StateBookingExpired
	case meta.IsStatusConditionTrue(pr.Status.Conditions, autoscalingv1.ConditionProvisioned):
		return StateProvisioned
	}
	if c := meta.FindStatusCondition(pr.Status.Conditions, autoscalingv1.ConditionProvisioned); c != nil && c.Reason == ReasonProvisioning {
		return StateProvisioning
	}
	return StateWaiting
}
