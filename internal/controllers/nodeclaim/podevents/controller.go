// Package podevents records when pods last arrived on or left a NodeClaim's node, in the claim's
// status.lastPodEventTime: consolidation waits consolidateAfter from it.
package podevents

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"capstan.dev/capstan/internal/claimstore"
)

// Dedupe is the least time between two updates of a claim's lastPodEventTime: a burst of pods
// arriving costs one write.
const Dedupe = 5 * time.Second

// Controller updates lastPodEventTime. Its requests are node names.
type Controller struct {
	Client client.Client
	Clock  clock.Clock
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.podevents" }

// Register adds the controller to a manager.
func (c *Controller) Register(mgr ctrl.Manager) error {
	toNode := handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
		if pod, ok := o.(*corev1.Pod); ok && pod.Spec.NodeName != "" {
			return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: pod.Spec.NodeName}}}
		}
		return nil
	})
	changed := predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return e.Object.(*corev1.Pod).Spec.NodeName != "" },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, n := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
			return o.Spec.NodeName != n.Spec.NodeName || terminal(n) != terminal(o) || o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).Watches(&corev1.Pod{}, toNode, builder.WithPredicates(changed)).Complete(c)
}

func terminal(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// Reconcile stamps the claim of the node named in the request.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	node := &corev1.Node{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: req.Name}, node); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if node.Spec.ProviderID == "" {
		return reconcile.Result{}, nil
	}
	nc, err := claimstore.ByProviderID(ctx, c.Client, node.Spec.ProviderID)
	if err != nil || nc == nil {
		return reconcile.Result{}, err
	}
	now := c.Clock.Now()
	if last := nc.Status.LastPodEventTime.Time; !last.IsZero() && now.Sub(last) < Dedupe {
		return reconcile.Result{RequeueAfter: Dedupe - now.Sub(last)}, nil
	}
	stored := nc.DeepCopy()
	nc.Status.LastPodEventTime = metav1.NewTime(now)
	if err := c.Client.Status().Patch(ctx, nc, client.MergeFrom(stored)); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patching lastPodEventTime: %w", err))
	}
	return reconcile.Result{}, nil
}
