// Package disruptionconditions marks NodeClaims that disruption may act on; it does not disrupt anything
// itself. An initialized NodeClaim is Consolidatable once its NodePool's consolidateAfter has
// passed since a pod last arrived on or left its node (or since it initialized), and stays so
// until the next pod event; with consolidateAfter Never it never is. A launched NodeClaim is Drifted when its NodePool's template hash changed (same hash
// version), when its labels no longer satisfy its NodePool's requirements, or when the cloud
// provider says its machine no longer matches its NodeClass. The condition carries the reason,
// so `kubectl get nodeclaims -o wide` and the explain tools can say why.
package disruptionconditions

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodeclasses"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/requirements"
)

// Drift reasons.
const (
	ReasonNodePoolDrifted     = "NodePoolDrifted"
	ReasonRequirementsDrifted = "RequirementsDrifted"
)

// Controller keeps the Drifted condition of NodeClaims current.
type Controller struct {
	Client client.Client
	Cloud  cloudprovider.CloudProvider
	Clock  clock.Clock
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.disruption" }

// Register adds the controller to a manager; changes of a NodePool's spec or annotations (its
// template hash) requeue its NodeClaims. Its status changes do not: they follow every claim's
// launch and termination, and requeueing the whole pool each time made a burst quadratic.
//
// A change of one of the provider's NodeClasses (its spec, or what its status resolved: a newer
// image behind an alias, a subnet untagged) requeues the claims launched from it, so the
// provider's drift check runs then rather than at the claim's next event.
func (c *Controller) Register(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&karpv1.NodeClaim{})
	for _, gk := range c.Cloud.NodeClasses() {
		obj, err := nodeclasses.Object(mgr.GetScheme(), gk)
		if err != nil {
			return err
		}
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
			ncs := &karpv1.NodeClaimList{}
			if err := c.Client.List(ctx, ncs, client.UnsafeDisableDeepCopy); err != nil {
				return nil
			}
			var reqs []reconcile.Request
			for i := range ncs.Items {
				ref := ncs.Items[i].Spec.NodeClassRef
				if ref != nil && ref.Group == gk.Group && ref.Kind == gk.Kind && ref.Name == o.GetName() {
					reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ncs.Items[i])})
				}
			}
			return reqs
		}))
	}
	return b.Watches(&karpv1.NodePool{}, handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, o client.Object) []reconcile.Request {
		ncs := &karpv1.NodeClaimList{}
		// Only names are read: the cache's objects, not copies.
		if err := c.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: o.GetName()}, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(ncs.Items))
		for i := range ncs.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ncs.Items[i])})
		}
		return reqs
	}), builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).Complete(c)
}

// Reconcile sets or clears Drifted and Consolidatable.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nc := &karpv1.NodeClaim{}
	if err := c.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !nc.DeletionTimestamp.IsZero() || !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeLaunched) ||
		!cloudprovider.Manages(c.Cloud, nc.Spec.NodeClassRef) {
		return reconcile.Result{}, nil
	}
	np := &karpv1.NodePool{}
	if err := c.Client.Get(ctx, client.ObjectKey{Name: nc.Labels[karpv1.NodePoolLabelKey]}, np); err != nil {
		// A claim without its NodePool is left to the NodePool's deletion.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	reason, msg, err := c.drift(ctx, np, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	stored := nc.DeepCopy()
	if reason == "" {
		// Not drifted: no Drifted condition at all, as Karpenter (tools list the drifted claims
		// as those that have one).
		meta.RemoveStatusCondition(&nc.Status.Conditions, karpv1.ConditionTypeDrifted)
	} else {
		nodeclaims.SetCondition(nc, c.Clock, karpv1.ConditionTypeDrifted, metav1.ConditionTrue, reason, msg)
	}
	result := c.consolidatable(np, nc)
	if nodeclaims.ConditionsEqual(stored, nc) {
		return result, nil
	}
	if res, err := claimstore.PatchStatus(ctx, c.Client, nc, stored); err != nil || res.RequeueAfter > 0 {
		return res, err
	}
	return result, nil
}

// consolidatable sets or removes Consolidatable and says when to look again.
func (c *Controller) consolidatable(np *karpv1.NodePool, nc *karpv1.NodeClaim) reconcile.Result {
	initialized := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeInitialized)
	after := np.Spec.Disruption.ConsolidateAfter.Duration
	if initialized == nil || initialized.Status != metav1.ConditionTrue || after == nil {
		meta.RemoveStatusCondition(&nc.Status.Conditions, karpv1.ConditionTypeConsolidatable)
		return reconcile.Result{}
	}
	since := initialized.LastTransitionTime.Time
	if t := nc.Status.LastPodEventTime.Time; t.After(since) {
		since = t
	}
	if wait := since.Add(*after).Sub(c.Clock.Now()); wait > 0 {
		meta.RemoveStatusCondition(&nc.Status.Conditions, karpv1.ConditionTypeConsolidatable)
		return reconcile.Result{RequeueAfter: wait}
	}
	nodeclaims.SetCondition(nc, c.Clock, karpv1.ConditionTypeConsolidatable, metav1.ConditionTrue, "Consolidatable", "")
	return reconcile.Result{}
}

// drift says why the claim drifted, or "" when it has not.
func (c *Controller) drift(ctx context.Context, np *karpv1.NodePool, nc *karpv1.NodeClaim) (string, string, error) {
	if nc.Annotations[karpv1.NodePoolHashVersionAnnotationKey] == nodepools.HashVersion {
		if h := nc.Annotations[karpv1.NodePoolHashAnnotationKey]; h != "" && h != nodepools.Hash(np) {
			return ReasonNodePoolDrifted, "the NodePool's template changed since the NodeClaim was created", nil
		}
	}
	reqs, err := nodepools.Requirements(np)
	if err != nil {
		return "", "", err
	}
	// Only labels the claim has are judged: a key it lacks was never resolved for it.
	var broken string
	reqs.Each(func(r requirements.Requirement) {
		if v, ok := nc.Labels[r.Key]; ok && broken == "" && !r.Allows(v) {
			broken = fmt.Sprintf("label %s=%s no longer satisfies the NodePool's requirement %s", r.Key, v, r.String())
		}
	})
	if broken != "" {
		return ReasonRequirementsDrifted, broken, nil
	}
	reason, err := c.Cloud.IsDrifted(ctx, nc)
	if err != nil {
		if cloudprovider.IsNodeClassNotReady(err) {
			return "", "", nil
		}
		return "", "", fmt.Errorf("checking drift with the cloud provider: %w", err)
	}
	if reason != "" {
		return string(reason), "the machine no longer matches its NodeClass", nil
	}
	return "", "", nil
}
