// Package simnodeclass keeps the status of SimNodeClasses: Ready, and how many instance types the
// class offers. A class that offers none says why — an instanceTypesFrom ConfigMap that is missing
// or malformed is named with the entry and field — and NodePools over it are not ready either.
package simnodeclass

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
)

// Condition reasons.
const (
	ReasonResolved    = "InstanceTypesResolved"
	ReasonNotResolved = "InstanceTypesNotResolved"
)

// Controller sets SimNodeClass status.
type Controller struct {
	Client   client.Client
	Provider *sim.Provider
	Clock    clock.PassiveClock
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "simnodeclass" }

// Register adds the controller to a manager; a ConfigMap's change requeues the classes that read
// it.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&simv1alpha1.SimNodeClass{}).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			sncs := &simv1alpha1.SimNodeClassList{}
			if err := c.Client.List(ctx, sncs); err != nil {
				return nil
			}
			var out []reconcile.Request
			for _, snc := range sncs.Items {
				if from := snc.Spec.InstanceTypesFrom; from != nil && from.ConfigMap.Namespace == o.GetNamespace() && from.ConfigMap.Name == o.GetName() {
					out = append(out, reconcile.Request{NamespacedName: client.ObjectKey{Name: snc.Name}})
				}
			}
			return out
		})).Complete(c)
}

// Reconcile resolves the class's instance types and records the outcome.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	snc := &simv1alpha1.SimNodeClass{}
	if err := c.Client.Get(ctx, req.NamespacedName, snc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !snc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	stored := snc.DeepCopy()
	its, err := c.Provider.InstanceTypes(ctx, snc)
	cond := metav1.Condition{Type: simv1alpha1.ConditionTypeReady, ObservedGeneration: snc.Generation, LastTransitionTime: metav1.NewTime(c.Clock.Now())}
	switch {
	case err == nil && len(its) > 0:
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonResolved
		snc.Status.InstanceTypes = int32(len(its))
	case err == nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonNotResolved, "no instance type matches the class"
		snc.Status.InstanceTypes = 0
	case cloudprovider.IsNodeClassNotReady(err):
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonNotResolved, err.Error()
		snc.Status.InstanceTypes = 0
	default:
		return reconcile.Result{}, fmt.Errorf("resolving instance types: %w", err)
	}
	meta.SetStatusCondition(&snc.Status.Conditions, cond)
	if equality.Semantic.DeepEqual(stored.Status, snc.Status) {
		return reconcile.Result{}, nil
	}
	// Locked on the version read: a merge patch writes the conditions list whole. On a conflict
	// the class is read again shortly.
	if err := c.Client.Status().Patch(ctx, snc, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	} else if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patching SimNodeClass status: %w", err))
	}
	return reconcile.Result{}, nil
}
