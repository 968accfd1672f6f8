package provisioning

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/planning"
)

// PodTrigger starts a provisioning pass when a pod becomes provisionable, and when capacity goes
// away (a NodeClaim or Node deleted) so that the pods it held find room again.
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
	return ctrl.NewControllerManagedBy(mgr).Named(t.Name() + ".nodeclaim").For(&karpv1.NodeClaim{}).WithEventFilter(deleted).Complete(t)
}

// Reconcile triggers the provisioner.
func (t *PodTrigger) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	t.Provisioner.Trigger()
	return reconcile.Result{}, nil
}
