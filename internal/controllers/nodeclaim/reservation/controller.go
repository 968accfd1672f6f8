// Package reservation follows the capacity reservations NodeClaims run in as they end: a
// capacity block's machines are drained before EC2 reclaims them, and a machine whose default
// reservation ended — which the cloud now runs as plain on-demand — is labelled so.
package reservation

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/periodic"
)

// Controller sweeps the NodeClaims of capacity type reserved on an interval.
type Controller struct {
	Client   client.Client
	Cloud    cloudprovider.CloudProvider
	Clock    clock.Clock
	Recorder events.EventRecorder
	// Interval between sweeps (default 1 minute).
	Interval time.Duration
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.reservation" }

// NeedLeaderElection makes only the leader sweep.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start sweeps until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("controller", c.Name()))
	interval := c.Interval
	if interval == 0 {
		interval = time.Minute
	}
	return periodic.Run(ctx, c.Clock, interval, "following capacity reservations", c.Sync)
}

// Sync runs one sweep: every reserved NodeClaim whose machine the cloud no longer runs in a
// reservation is relabelled on-demand (with its Node); every one in a capacity block that ends
// within cloudprovider.CapacityBlockDrainLead is deleted, so that it drains (PodDisruptionBudgets
// and do-not-disrupt respected up to its terminationGracePeriod) and its pods are provisioned
// elsewhere before EC2 terminates it.
func (c *Controller) Sync(ctx context.Context) error {
	ncs := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, ncs, client.MatchingLabels{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeReserved}); err != nil {
		return fmt.Errorf("listing reserved nodeclaims: %w", err)
	}
	if len(ncs.Items) == 0 {
		return nil
	}
	machines, err := c.Cloud.List(ctx)
	if err != nil {
		return fmt.Errorf("listing machines: %w", err)
	}
	byProvider := map[string]*karpv1.NodeClaim{}
	for _, m := range machines {
		byProvider[m.Status.ProviderID] = m
	}
	reservations, err := cloudprovider.Reservations(ctx, c.Cloud)
	if err != nil {
		return fmt.Errorf("reading capacity reservations: %w", err)
	}
	now := c.Clock.Now()
	var errs []error
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		if !nc.DeletionTimestamp.IsZero() || nc.Status.ProviderID == "" {
			continue
		}
		if m, ok := byProvider[nc.Status.ProviderID]; ok && m.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved {
			errs = append(errs, c.onDemand(ctx, nc))
			continue
		}
		id := nc.Labels[cloudprovider.ReservationIDLabelKey]
		r, ok := reservations[id]
		if !ok || r.Type != cloudprovider.ReservationTypeCapacityBlock || r.End.IsZero() || now.Before(r.End.Add(-cloudprovider.CapacityBlockDrainLead)) {
			continue
		}
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "CapacityBlockExpiring", "Disrupt",
			"capacity block %s ends at %s: draining the node before EC2 reclaims it", id, r.End.UTC().Format(time.RFC3339))
		log.FromContext(ctx).Info("deleting nodeclaim: its capacity block ends", "NodeClaim", nc.Name, "reservation", id, "end", r.End)
		if err := c.Client.Delete(ctx, nc); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting NodeClaim %s: %w", nc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// onDemand relabels a claim, and its Node, whose machine left its reservation.
func (c *Controller) onDemand(ctx context.Context, nc *karpv1.NodeClaim) error {
	id := nc.Labels[cloudprovider.ReservationIDLabelKey]
	relabel := func(obj client.Object) error {
		stored := obj.DeepCopyObject().(client.Object)
		labels := obj.GetLabels()
		labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeOnDemand
		delete(labels, cloudprovider.ReservationIDLabelKey)
		delete(labels, cloudprovider.ReservationTypeLabelKey)
		delete(labels, cloudprovider.ReservationInterruptibleLabelKey)
		obj.SetLabels(labels)
		// Labels are a map: a merge patch changes these keys and leaves the others alone.
		return client.IgnoreNotFound(c.Client.Patch(ctx, obj, client.MergeFrom(stored)))
	}
	if err := relabel(nc); err != nil {
		return fmt.Errorf("relabelling NodeClaim %s: %w", nc.Name, err)
	}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; n.Spec.ProviderID == nc.Status.ProviderID && n.Labels[karpv1.CapacityTypeLabelKey] == karpv1.CapacityTypeReserved {
			if err := relabel(n); err != nil {
				return fmt.Errorf("relabelling Node %s: %w", n.Name, err)
			}
		}
	}
	c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "CapacityReservationEnded", "Relabel",
		"capacity reservation %s ended; the machine runs on as on-demand", id)
	return nil
}
