// Package expiration deletes NodeClaims older than their expireAfter: a forced disruption that
// replaces machines periodically (the termination controller still drains them).
package expiration

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/metrics"
)

// Controller expires NodeClaims.
type Controller struct {
	Client client.Client
	// Cloud decides which claims are Capstan's (cloudprovider.Manages).
	Cloud    cloudprovider.CloudProvider
	Clock    clock.Clock
	Recorder events.EventRecorder
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.expiration" }

// Register adds the controller to a manager.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&karpv1.NodeClaim{}).Complete(c)
}

// Reconcile deletes the claim once it is older than its expireAfter, or comes back then.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nc := &karpv1.NodeClaim{}
	if err := c.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	d := nc.Spec.ExpireAfter.Duration
	if !nc.DeletionTimestamp.IsZero() || d == nil || !cloudprovider.Manages(c.Cloud, nc.Spec.NodeClassRef) {
		return reconcile.Result{}, nil
	}
	if left := nc.CreationTimestamp.Add(*d).Sub(c.Clock.Now()); left > 0 {
		return reconcile.Result{RequeueAfter: left}, nil
	}
	if err := c.Client.Delete(ctx, nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("deleting expired nodeclaim: %w", err))
	}
	c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "Expired", "Expire", "NodeClaim expired after %s", d.String())
	c.Metrics.Disrupted(nc, metrics.ReasonExpired)
	log.FromContext(ctx).Info("disrupting nodeclaim(s)", "controller", c.Name(), "reason", "expired",
		"NodeClaim", klog.KObj(nc), "expire-after", d.String())
	return reconcile.Result{}, nil
}
