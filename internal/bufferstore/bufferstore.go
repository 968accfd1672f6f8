// Package bufferstore reads CapacityBuffers through the API server — resolving each one's chunk
// (a PodTemplate's or a workload's pod template) and count, and making the virtual pods the
// provisioner plans and disruption keeps room for — and writes back where their room was found.
// The rules themselves (counts, virtual pods' marks, outcomes) are internal/capacitybuffer's.
package bufferstore

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	"capstan.dev/capstan/internal/capacitybuffer"
)

// Resolved is a buffer's chunk and count.
type Resolved struct {
	Template   corev1.PodTemplateSpec
	Generation int64
	Replicas   int32
	// PodTemplateRef is the PodTemplate named (nil for a scalableRef).
	PodTemplateRef *autoscalingv1beta1.LocalObjectRef
}

// ResolveError is why a buffer did not resolve, with the ReadyForProvisioning reason.
type ResolveError struct {
	Reason string
	Err    error
}

func (e *ResolveError) Error() string { return e.Err.Error() }
func (e *ResolveError) Unwrap() error { return e.Err }

// Resolve reads the buffer's chunk and computes its count. A missing or unsupported reference is
// a *ResolveError; other errors are the API server's.
func Resolve(ctx context.Context, r client.Reader, cb *autoscalingv1beta1.CapacityBuffer) (*Resolved, error) {
	var out Resolved
	var scalable *int32
	switch {
	case cb.Spec.PodTemplateRef != nil:
		pt := &corev1.PodTemplate{}
		if err := r.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: cb.Spec.PodTemplateRef.Name}, pt); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &ResolveError{capacitybuffer.ReasonPodTemplateNotFound, fmt.Errorf("spec.podTemplateRef: PodTemplate %s/%s not found", cb.Namespace, cb.Spec.PodTemplateRef.Name)}
			}
			return nil, err
		}
		out.Template, out.Generation, out.PodTemplateRef = pt.Template, pt.Generation, cb.Spec.PodTemplateRef.DeepCopy()
	case cb.Spec.ScalableRef != nil:
		ref := cb.Spec.ScalableRef
		if ref.APIGroup != "" && ref.APIGroup != appsv1.GroupName {
			return nil, &ResolveError{capacitybuffer.ReasonResolutionFailed, fmt.Errorf("spec.scalableRef: %s.%s is not a kind Capstan reads (Deployment, ReplicaSet or StatefulSet of apps)", ref.Kind, ref.APIGroup)}
		}
		var obj client.Object
		switch ref.Kind {
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "ReplicaSet":
			obj = &appsv1.ReplicaSet{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		default:
			return nil, &ResolveError{capacitybuffer.ReasonResolutionFailed, fmt.Errorf("spec.scalableRef: kind %q is not one Capstan reads (Deployment, ReplicaSet or StatefulSet)", ref.Kind)}
		}
		if err := r.Get(ctx, client.ObjectKey{Namespace: cb.Namespace, Name: ref.Name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &ResolveError{capacitybuffer.ReasonScalableRefNotFound, fmt.Errorf("spec.scalableRef: %s %s/%s not found", ref.Kind, cb.Namespace, ref.Name)}
			}
			return nil, err
		}
		var replicas *int32
		switch w := obj.(type) {
		case *appsv1.Deployment:
			out.Template, replicas = w.Spec.Template, w.Spec.Replicas
		case *appsv1.ReplicaSet:
			out.Template, replicas = w.Spec.Template, w.Spec.Replicas
		case *appsv1.StatefulSet:
			out.Template, replicas = w.Spec.Template, w.Spec.Replicas
		}
		// An unset replicas is the workload's default, 1.
		scalable = ptr.To(ptr.Deref(replicas, 1))
		out.Generation = obj.GetGeneration()
	default:
		return nil, &ResolveError{capacitybuffer.ReasonResolutionFailed, errors.New("spec: neither podTemplateRef nor scalableRef is set")}
	}
	out.Replicas = capacitybuffer.Replicas(cb, out.Template.Spec, scalable)
	return &out, nil
}

// Pods are the virtual pods of every buffer ready for provisioning with the active-capacity
// strategy: status.replicas pods of its chunk's template, in its namespace, each marked as
// waiting for a node so that the provisioner plans it like a pending pod.
func Pods(ctx context.Context, r client.Reader) ([]*corev1.Pod, error) {
	cbs := &autoscalingv1beta1.CapacityBufferList{}
	if err := r.List(ctx, cbs); err != nil {
		if meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing capacitybuffers: %w", err)
	}
	var out []*corev1.Pod
	for i := range cbs.Items {
		cb := &cbs.Items[i]
		if !meta.IsStatusConditionTrue(cb.Status.Conditions, autoscalingv1beta1.ConditionReadyForProvisioning) || cb.Status.Replicas == nil || *cb.Status.Replicas <= 0 {
			continue
		}
		res, err := Resolve(ctx, r, cb)
		if err != nil {
			// The buffer's controller says why on its condition.
			continue
		}
		for n := range min(*cb.Status.Replicas, res.Replicas) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: fmt.Sprintf("%s-buffer-%d", cb.Name, n), Namespace: cb.Namespace,
				UID:         types.UID(fmt.Sprintf("capacitybuffer/%s/%s/%d", cb.UID, cb.Name, n)),
				Labels:      res.Template.Labels,
				Annotations: map[string]string{capacitybuffer.VirtualAnnotationKey: cb.Namespace + "/" + cb.Name},
			}, Spec: *res.Template.Spec.DeepCopy()}
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
			out = append(out, p)
		}
	}
	return out, nil
}

// WriteProvisioning records each buffer's outcome on its Provisioning condition, writing only
// the buffers whose condition changes.
func WriteProvisioning(ctx context.Context, c client.Client, now metav1.Time, outcomes map[types.NamespacedName]capacitybuffer.Outcome) error {
	var errs []error
	for key, o := range outcomes {
		cb := &autoscalingv1beta1.CapacityBuffer{}
		if err := c.Get(ctx, key, cb); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		cond := metav1.Condition{Type: autoscalingv1beta1.ConditionProvisioning, Status: metav1.ConditionTrue, ObservedGeneration: cb.Generation, LastTransitionTime: now}
		switch {
		case o.Unplaced > 0:
			cond.Status, cond.Reason = metav1.ConditionFalse, capacitybuffer.ReasonUnschedulable
			cond.Message = fmt.Sprintf("%d of %d chunk(s) have no room: %s", o.Unplaced, o.Existing+o.New+o.Unplaced, o.Why)
		case o.New > 0:
			cond.Reason = capacitybuffer.ReasonRequiresNewCapacity
			cond.Message = fmt.Sprintf("%d chunk(s) on running nodes, %d on machines being launched", o.Existing, o.New)
		default:
			cond.Reason = capacitybuffer.ReasonFitsExistingCapacity
			cond.Message = fmt.Sprintf("%d chunk(s) on running nodes", o.Existing)
		}
		if cur := meta.FindStatusCondition(cb.Status.Conditions, cond.Type); cur != nil && cur.Status == cond.Status && cur.Reason == cond.Reason && cur.Message == cond.Message {
			continue
		}
		stored := cb.DeepCopy()
		meta.SetStatusCondition(&cb.Status.Conditions, cond)
		if err := c.Status().Patch(ctx, cb, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsConflict(err) {
			// A conflict is written again by the next pass.
			errs = append(errs, client.IgnoreNotFound(err))
		}
	}
	return errors.Join(errs...)
}
