// Package capacitybuffer keeps CapacityBuffers' status: the chunk each resolves to
// (ReadyForProvisioning, status.replicas, status.podTemplateRef and podTemplateGeneration), and
// wakes the provisioner, which plans the chunks as virtual pods and writes Provisioning.
package capacitybuffer

import (
	"context"
	"errors"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	"capstan.dev/capstan/internal/bufferstore"
	"capstan.dev/capstan/internal/capacitybuffer"
)

// Controller reconciles CapacityBuffers.
type Controller struct {
	Client client.Client
	Clock  clock.Clock
	// Enabled is the CapacityBuffer feature gate. Off, each buffer says so on
	// ReadyForProvisioning (False, FeatureGateDisabled) and nothing is planned for it.
	Enabled bool
	// Trigger wakes the provisioner after a buffer changed; nil wakes nothing.
	Trigger func()

	logged sync.Once
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "capacitybuffer" }

// Register adds the controller to a manager: buffers, and the PodTemplates and workloads they
// name.
func (c *Controller) Register(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&autoscalingv1beta1.CapacityBuffer{})
	if c.Enabled {
		b = b.Watches(&corev1.PodTemplate{}, handler.EnqueueRequestsFromMapFunc(c.naming("", "PodTemplate"))).
			Watches(&appsv1.Deployment{}, handler.EnqueueRequestsFromMapFunc(c.naming(appsv1.GroupName, "Deployment"))).
			Watches(&appsv1.ReplicaSet{}, handler.EnqueueRequestsFromMapFunc(c.naming(appsv1.GroupName, "ReplicaSet"))).
			Watches(&appsv1.StatefulSet{}, handler.EnqueueRequestsFromMapFunc(c.naming(appsv1.GroupName, "StatefulSet")))
	}
	return b.Complete(c)
}

// naming maps an object to the buffers of its namespace that name it.
func (c *Controller) naming(group, kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		cbs := &autoscalingv1beta1.CapacityBufferList{}
		if err := c.Client.List(ctx, cbs, client.InNamespace(o.GetNamespace())); err != nil {
			return nil
		}
		var out []reconcile.Request
		for i := range cbs.Items {
			s := cbs.Items[i].Spec
			if kind == "PodTemplate" && s.PodTemplateRef != nil && s.PodTemplateRef.Name == o.GetName() ||
				s.ScalableRef != nil && s.ScalableRef.Kind == kind && (s.ScalableRef.APIGroup == group || s.ScalableRef.APIGroup == "" && group == appsv1.GroupName) && s.ScalableRef.Name == o.GetName() {
				out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&cbs.Items[i])})
			}
		}
		return out
	}
}

// Retry is when a buffer whose reference is missing is read again, should no watch event come.
const Retry = time.Minute

// Reconcile resolves one buffer into its status.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	cb := &autoscalingv1beta1.CapacityBuffer{}
	if err := c.Client.Get(ctx, req.NamespacedName, cb); err != nil {
		if apierrors.IsNotFound(err) && c.Trigger != nil && c.Enabled {
			// Its room is no longer kept: a pass takes its virtual pods out of the plan.
			c.Trigger()
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := cb.DeepCopy()
	strategy := autoscalingv1beta1.ActiveCapacity
	if cb.Spec.ProvisioningStrategy != nil {
		strategy = *cb.Spec.ProvisioningStrategy
	}
	cb.Status.ProvisioningStrategy = &strategy
	ready := func(ok bool, reason, msg string) {
		s := metav1.ConditionTrue
		if !ok {
			s = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&cb.Status.Conditions, metav1.Condition{Type: autoscalingv1beta1.ConditionReadyForProvisioning, Status: s,
			Reason: reason, Message: msg, ObservedGeneration: cb.Generation, LastTransitionTime: metav1.NewTime(c.Clock.Now())})
	}
	var result reconcile.Result
	switch res, err := bufferstore.Resolve(ctx, c.Client, cb); {
	case !c.Enabled:
		ready(false, capacitybuffer.ReasonFeatureGateDisabled, "the CapacityBuffer feature gate is off: Capstan keeps no room for this buffer (as Karpenter with the gate off)")
		c.logged.Do(func() {
			log.FromContext(ctx).Info("CapacityBuffers ignored: the CapacityBuffer feature gate is off", "CapacityBuffer", req.String())
		})
	case err != nil:
		var re *bufferstore.ResolveError
		if !errors.As(err, &re) {
			return reconcile.Result{}, err
		}
		ready(false, re.Reason, re.Error())
		cb.Status.Replicas, cb.Status.PodTemplateRef, cb.Status.PodTemplateGeneration = nil, nil, nil
		result.RequeueAfter = Retry
	case strategy != autoscalingv1beta1.ActiveCapacity:
		ready(false, capacitybuffer.ReasonResolutionFailed, "spec.provisioningStrategy "+strategy+": Capstan keeps room only for "+autoscalingv1beta1.ActiveCapacity)
		cb.Status.Replicas = nil
	default:
		ready(true, capacitybuffer.ReasonResolved, "")
		cb.Status.Replicas, cb.Status.PodTemplateRef, cb.Status.PodTemplateGeneration = &res.Replicas, res.PodTemplateRef, &res.Generation
	}
	if !meta.IsStatusConditionTrue(cb.Status.Conditions, autoscalingv1beta1.ConditionReadyForProvisioning) {
		// No chunk is planned for it: whatever room a pass found for it before is not kept.
		meta.SetStatusCondition(&cb.Status.Conditions, metav1.Condition{Type: autoscalingv1beta1.ConditionProvisioning, Status: metav1.ConditionFalse,
			Reason: capacitybuffer.ReasonNotReadyForProvisioning, Message: "the buffer is not ready for provisioning (see ReadyForProvisioning)",
			ObservedGeneration: cb.Generation, LastTransitionTime: metav1.NewTime(c.Clock.Now())})
	}
	if !equality.Semantic.DeepEqual(stored.Status, cb.Status) {
		if err := c.Client.Status().Patch(ctx, cb, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
	}
	if c.Trigger != nil && c.Enabled {
		c.Trigger()
	}
	return result, nil
}
