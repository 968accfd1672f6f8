package provisioning

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/planning"
)

// PodTrigger starts a provisioning pass when a pod becomes provisionable, when capacity goes
// away (a NodeClaim deleted) so that the pods it held find room again, and when a NodePool may
// take pods it could not before (created, its spec changed, or its Ready condition changed).
type PodTrigger struct {
	Provisioner *Provisioner
}

// Name is the controller's name.
func (t *PodTrigger) Name() string { return "provisioner.trigger" }

// Register adds the trigger to a manager.
func (t *PodTrigger) Register(mgr ctrl.Manager) error {
	provisionable := predicate.NewPredicateFuncs(func(o client.Object) bool {
		pod, ok := o.(*corev1.Pod)
		return ok && planning.Provisionable(pod)
	})
	deleted := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(e event.UpdateEvent) bool { return !e.ObjectNew.GetDeletionTimestamp().IsZero() },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named(t.Name() + ".pod").For(&corev1.Pod{}).WithEventFilter(provisionable).Complete(t); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).Named(t.Name() + ".nodeclaim").For(&karpv1.NodeClaim{}).WithEventFilter(deleted).Complete(claimGone{t.Provisioner}); err != nil {
		return err
	}
	poolChanged := predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*karpv1.NodePool)
			cur, okCur := e.ObjectNew.(*karpv1.NodePool)
			return okOld && okCur && PoolChanged(old, cur)
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).Named(t.Name() + ".nodepool").For(&karpv1.NodePool{}).WithEventFilter(poolChanged).Complete(t)
}

// PoolChanged is whether a NodePool update may let it take pods it did not take before: its spec
// changed (a new generation) or its Ready condition's status did (its NodeClass resolved).
func PoolChanged(old, cur *karpv1.NodePool) bool {
	if old.Generation != cur.Generation {
		return true
	}
	ready := func(np *karpv1.NodePool) metav1.ConditionStatus {
		if c := meta.FindStatusCondition(np.Status.Conditions, karpv1.ConditionTypeReady); c != nil {
			return c.Status
		}
		return metav1.ConditionUnknown
	}
	return ready(old) != ready(cur)
}

// Reconcile triggers the provisioner.
func (t *PodTrigger) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	t.Provisioner.Trigger()
	return reconcile.Result{}, nil
}

// claimGone forgets a NodeClaim being deleted or gone from the claims the provisioner created, and
// triggers it: the claim's pods need a place again.
type claimGone struct{ p *Provisioner }

// Reconcile forgets the claim and triggers the provisioner.
func (c claimGone) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	c.p.Forget(req.Name)
	c.p.Trigger()
	return reconcile.Result{}, nil
}
