// Package nodeoverlay evaluates the cluster's NodeOverlays (Karpenter's NodeOverlay gate) into
// the table the cloud provider's instance types are adjusted with, and reports on each overlay
// whether it applies: ValidationSucceeded (and Ready) False with reason Conflict or
// RuntimeValidation when it does not.
package nodeoverlay

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/overlay"
)

// Controller evaluates every NodeOverlay against every NodePool in one pass, whatever changed.
type Controller struct {
	Client client.Client
	// Cloud answers with the instance types as the cloud offers them (not adjusted).
	Cloud cloudprovider.CloudProvider
	// Store receives each evaluation.
	Store *overlay.Store
	Clock clock.Clock
	// NodeClasses are objects of the NodeClass kinds the provider serves: a change to one
	// changes the instance types overlays select.
	NodeClasses []client.Object
	// Refresh is how often the overlays are evaluated again with nothing changed, for instance
	// types and offerings the cloud adds (default DefaultRefresh).
	Refresh time.Duration
	// Disabled is the NodeOverlay feature gate off: overlays are not evaluated (Store and Cloud
	// are not used), and each says so on its conditions (reason FeatureGateDisabled), with one
	// log line.
	Disabled bool

	warned sync.Once
}

// DefaultRefresh is the pause between evaluations when nothing changes.
const DefaultRefresh = 5 * time.Minute

// Coalescing is how long a change waits before the evaluation it triggers, so that the changes
// of one apply become one evaluation.
const Coalescing = 500 * time.Millisecond

// SkippedRetry is the pause before evaluating again when a NodePool's instance types failed.
const SkippedRetry = 10 * time.Second

// key is the one request the controller works on.
var key = reconcile.Request{NamespacedName: client.ObjectKey{Name: "nodeoverlays"}}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeoverlay" }

// Register adds the controller to a manager: NodeOverlay, NodePool and NodeClass changes (not
// their status writes, but a NodeClass's status: it resolves the offerings) trigger an evaluation.
func (c *Controller) Register(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named(c.Name()).
		Watches(&v1alpha1.NodeOverlay{}, everything(true)).
		Watches(&karpv1.NodePool{}, everything(true))
	for _, o := range c.NodeClasses {
		b = b.Watches(o, everything(false))
	}
	// One worker (the default): evaluations replace the whole table; two at once could land
	// out of order.
	return b.Complete(c)
}

// everything maps any event to the controller's one request, after Coalescing; with specOnly,
// updates that leave the generation alone (status and metadata writes) are ignored.
func everything(specOnly bool) handler.EventHandler {
	add := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) { q.AddAfter(key, Coalescing) }
	return handler.Funcs{
		CreateFunc: func(_ context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if !specOnly || e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration() {
				add(q)
			}
		},
		DeleteFunc: func(_ context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
		GenericFunc: func(_ context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(q)
		},
	}
}

// Reconcile evaluates every overlay against every NodePool Capstan manages, hands the table to
// the store and writes each overlay's conditions.
func (c *Controller) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	overlays := &v1alpha1.NodeOverlayList{}
	if err := c.Client.List(ctx, overlays); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodeoverlays: %w", err)
	}
	if c.Disabled {
		const msg = "the NodeOverlay feature gate is off: Capstan does not apply NodeOverlays (as Karpenter with the gate off)"
		verdicts := map[string]overlay.Verdict{}
		for _, o := range overlays.Items {
			verdicts[o.Name] = overlay.Verdict{Reason: overlay.ReasonFeatureGateDisabled, Message: msg}
		}
		if len(overlays.Items) > 0 {
			c.warned.Do(func() { log.FromContext(ctx).Info("NodeOverlays ignored: "+msg, "overlays", len(overlays.Items)) })
		}
		if conflicted, err := c.writeConditions(ctx, overlays.Items, verdicts); err != nil || conflicted {
			return reconcile.Result{RequeueAfter: Coalescing}, err
		}
		return reconcile.Result{}, nil
	}
	nps := &karpv1.NodePoolList{}
	if err := c.Client.List(ctx, nps); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodepools: %w", err)
	}
	// A pool whose instance types fail is left out: they fail before overlays matter (its
	// status says why).
	pools, skipped := overlay.Pools(ctx, c.Cloud, nps.Items)
	table, verdicts := overlay.Evaluate(overlays.Items, pools)
	c.Store.Set(table)
	log.FromContext(ctx).V(1).Info("evaluated nodeoverlays", "overlays", len(overlays.Items), "nodePools", len(pools), "notApplied", len(verdicts))
	conflicted, err := c.writeConditions(ctx, overlays.Items, verdicts)
	if err != nil {
		return reconcile.Result{}, err
	}
	if conflicted {
		// An overlay changed while it was evaluated: its change triggers another evaluation too.
		return reconcile.Result{RequeueAfter: Coalescing}, nil
	}
	if len(skipped) > 0 {
		// A pool left out reads as not evaluated (no launches from it) until an evaluation
		// includes it: try again soon, in case its failure was passing.
		log.FromContext(ctx).Info("nodepools left out of the nodeoverlay evaluation", "reasons", errors.Join(skipped...).Error())
		return reconcile.Result{RequeueAfter: SkippedRetry}, nil
	}
	refresh := c.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	return reconcile.Result{RequeueAfter: refresh}, nil
}

// writeConditions sets each overlay's ValidationSucceeded and Ready: True, or False with its
// verdict. conflicted reports an overlay that changed since it was read (a later evaluation
// follows).
func (c *Controller) writeConditions(ctx context.Context, overlays []v1alpha1.NodeOverlay, verdicts map[string]overlay.Verdict) (conflicted bool, err error) {
	for i := range overlays {
		o := &overlays[i]
		stored := o.DeepCopy()
		v, bad := verdicts[o.Name]
		now := metav1.NewTime(c.Clock.Now())
		for _, t := range []string{overlay.ConditionValidationSucceeded, overlay.ConditionReady} {
			cond := metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: t, ObservedGeneration: o.Generation, LastTransitionTime: now}
			if bad {
				cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v.Reason, v.Message
			}
			meta.SetStatusCondition(&o.Status.Conditions, cond)
		}
		if equality.Semantic.DeepEqual(stored.Status, o.Status) {
			continue
		}
		// Locked on the version read: the conditions list is written whole.
		err := c.Client.Status().Patch(ctx, o, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{}))
		switch {
		case apierrors.IsConflict(err):
			conflicted = true
		case err != nil && !apierrors.IsNotFound(err):
			return conflicted, fmt.Errorf("patching nodeoverlay %s status: %w", o.Name, err)
		}
	}
	return conflicted, nil
}
