// Package garbagecollection keeps the cloud and the cluster in agreement: machines no NodeClaim
// owns are terminated after a grace window (a launch whose claim was lost, a controller that
// crashed between launching and recording), NodeClaims whose machine vanished are deleted, and
// Nodes whose NodeClaim is gone are released.
package garbagecollection

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/periodic"
)

// GracePeriod is how long a machine, or a Node Capstan registered, may exist without a
// NodeClaim recording it.
const GracePeriod = 30 * time.Second

// Controller sweeps orphans on an interval.
type Controller struct {
	Client client.Client
	Cloud  cloudprovider.CloudProvider
	Clock  clock.Clock
	// Interval between sweeps (default 10s).
	Interval time.Duration
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.garbagecollection" }

// NeedLeaderElection makes only the leader sweep.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start sweeps until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("controller", c.Name()))
	interval := c.Interval
	if interval == 0 {
		interval = 10 * time.Second
	}
	return periodic.Run(ctx, c.Clock, interval, "garbage collecting", c.Sync)
}

// Sync runs one sweep.
func (c *Controller) Sync(ctx context.Context) error {
	machines, err := c.Cloud.List(ctx)
	if err != nil {
		return fmt.Errorf("listing machines: %w", err)
	}
	ncs := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, ncs); err != nil {
		return fmt.Errorf("listing nodeclaims: %w", err)
	}
	byName := map[string]*karpv1.NodeClaim{}
	byProvider := map[string]bool{}
	for i := range ncs.Items {
		byName[ncs.Items[i].Name] = &ncs.Items[i]
		if id := ncs.Items[i].Status.ProviderID; id != "" {
			byProvider[id] = true
		}
	}
	// A failure is reported after the sweep: one orphan the cloud will not terminate must not
	// keep vanished claims and released nodes waiting behind it.
	var errs []error
	alive := map[string]bool{}
	// claimOf is the NodeClaim each machine the cloud runs was launched for, by provider ID.
	claimOf := map[string]string{}
	for _, m := range machines {
		alive[m.Status.ProviderID] = true
		claimOf[m.Status.ProviderID] = m.Name
		if byProvider[m.Status.ProviderID] {
			continue
		}
		if _, claimed := byName[m.Name]; claimed {
			// The claim exists but has not recorded its machine yet: its lifecycle will.
			continue
		}
		if c.Clock.Since(m.CreationTimestamp.Time) < GracePeriod {
			continue
		}
		log.FromContext(ctx).Info("garbage collecting machine without a nodeclaim", "provider-id", m.Status.ProviderID, "NodeClaim", m.Name)
		if err := c.Cloud.Delete(ctx, m); cloudprovider.IgnoreNodeClaimNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("terminating orphan %s: %w", m.Status.ProviderID, err))
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	nodeByProvider := map[string]*corev1.Node{}
	for i := range nodes.Items {
		nodeByProvider[nodes.Items[i].Spec.ProviderID] = &nodes.Items[i]
	}
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		if !c.vanished(ctx, nc, alive, nodeByProvider[nc.Status.ProviderID]) {
			continue
		}
		log.FromContext(ctx).Info("garbage collecting nodeclaim whose machine is gone", "NodeClaim", nc.Name, "provider-id", nc.Status.ProviderID)
		if err := c.Client.Delete(ctx, nc); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting nodeclaim %s: %w", nc.Name, err))
			continue
		}
		c.Metrics.Disrupted(nc, metrics.ReasonGarbageCollected)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !controllerutil.ContainsFinalizer(n, karpv1.TerminationFinalizer) || byProvider[n.Spec.ProviderID] {
			continue
		}
		if _, claimed := byName[claimOf[n.Spec.ProviderID]]; claimed {
			// The machine's claim exists but has not recorded it (yet, or again: Capstan killed
			// after adopting the node and before writing the claim's status, the claim's launch
			// and registration are redone after the restart). Released, the node would be
			// deleted under its kubelet, which registers it again with the unregistered taint.
			continue
		}
		// The claims were listed before the nodes, and the two caches lag separately: a node
		// registering now may be ahead of its claim's launch record. Only a node that has had
		// the grace window to be matched is released (a 1,000-machine burst released four live
		// nodes this way).
		if c.Clock.Since(n.CreationTimestamp.Time) < GracePeriod {
			continue
		}
		log.FromContext(ctx).Info("releasing node whose nodeclaim is gone", "Node", n.Name)
		orig := n.DeepCopy()
		controllerutil.RemoveFinalizer(n, karpv1.TerminationFinalizer)
		// Optimistic lock: a merge patch replaces the whole finalizer list, and another
		// controller's finalizer added meanwhile must not be dropped with Capstan's.
		if err := c.Client.Patch(ctx, n, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("releasing node %s: %w", n.Name, err))
			continue
		}
		if err := c.Client.Delete(ctx, n); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting node %s: %w", n.Name, err))
		}
	}
	return errors.Join(errs...)
}

// vanished reports whether a claim's machine is gone for good. As in Karpenter, only registered
// claims are considered (a claim that never registered is given up by its registration timeout,
// not by the cloud's listing), a Ready node keeps its claim whatever the cloud says (its kubelet
// is evidently running; an eventually consistent listing may lag a launch), and the cloud is asked
// once more by provider ID before anything is deleted.
func (c *Controller) vanished(ctx context.Context, nc *karpv1.NodeClaim, alive map[string]bool, node *corev1.Node) bool {
	if !nc.DeletionTimestamp.IsZero() || nc.Status.ProviderID == "" || alive[nc.Status.ProviderID] ||
		!cloudprovider.Manages(c.Cloud, nc.Spec.NodeClassRef) ||
		!meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeRegistered) {
		return false
	}
	if node != nil && nodeclaims.NodeReady(node) {
		return false
	}
	_, err := c.Cloud.Get(ctx, nc.Status.ProviderID)
	return cloudprovider.IsNodeClaimNotFound(err)
}
