// Package status keeps a NodePool's status current: the summed capacity and count of its
// NodeClaims, its readiness (its NodeClass resolves to instance types and its template is valid),
// and the template hash annotation that NodeClaims are compared with for drift.
package status

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodeclasses"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/registration"
	"capstan.dev/capstan/internal/spend"
)

// Controller reconciles NodePool status.
type Controller struct {
	Client client.Client
	Cloud  cloudprovider.CloudProvider
	Clock  clock.Clock
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// StaticCapacity is the StaticCapacity feature gate: whether static pools are kept at their
	// count (the condition ConditionTypeStaticCapacity says it on each static pool).
	StaticCapacity bool
	// Health, shared with the NodeClaim lifecycle controller, is reset when the pool or its
	// NodeClass changes (NodeRegistrationHealthy goes Unknown); nil leaves the condition alone.
	Health *registration.Tracker

	// warned holds the static pools whose ignored replicas were logged (once each).
	warned sync.Map
}

// ConditionTypeStaticCapacity is the condition of a static NodePool (spec.replicas) saying
// whether Capstan keeps its count: False with reason FeatureGateDisabled while the
// StaticCapacity gate is off. Pools without replicas do not carry it.
const ConditionTypeStaticCapacity = "StaticCapacity"

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodepool.status" }

// Register adds the controller to a manager; NodeClaim changes requeue their pool, coalesced
// (claimEvents), and a NodeClass change the pools that name it.
func (c *Controller) Register(mgr ctrl.Manager) error {
	b := ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&karpv1.NodePool{}).
		Watches(&karpv1.NodeClaim{}, claimEvents(ClaimCoalescing))
	for _, gk := range c.Cloud.NodeClasses() {
		obj, err := nodeclasses.Object(mgr.GetScheme(), gk)
		if err != nil {
			return err
		}
		b = b.Watches(obj, handler.EnqueueRequestsFromMapFunc(poolsOfNodeClass(c.Client, gk)))
	}
	return b.Complete(c)
}

// poolsOfNodeClass maps a NodeClass of kind gk to the NodePools that name it: its readiness is
// theirs, and its changes reset their registration health.
func poolsOfNodeClass(r client.Reader, gk schema.GroupKind) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		nps := &karpv1.NodePoolList{}
		if err := r.List(ctx, nps, client.UnsafeDisableDeepCopy); err != nil {
			return nil
		}
		var reqs []reconcile.Request
		for i := range nps.Items {
			if ref := nps.Items[i].Spec.Template.Spec.NodeClassRef; ref != nil && ref.Group == gk.Group && ref.Kind == gk.Kind && ref.Name == o.GetName() {
				reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&nps.Items[i])})
			}
		}
		return reqs
	}
}

// ClaimCoalescing is how long a NodeClaim change waits before its pool's status is recomputed,
// so that the changes of a burst (a thousand claims launching, registering, initialising) cost a
// recount a second, not one per change: each recount lists the pool's claims and patches its
// status. A NodePool's own changes are not delayed.
const ClaimCoalescing = time.Second

// claimEvents enqueues a claim's pool after delay; the queue keeps one pending entry per pool, so
// the changes within that time become one reconcile.
func claimEvents(delay time.Duration) handler.EventHandler {
	enqueue := func(o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if np := o.GetLabels()[karpv1.NodePoolLabelKey]; np != "" {
			q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKey{Name: np}}, delay)
		}
	}
	return handler.Funcs{
		CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
		UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.ObjectNew, q)
			if e.ObjectOld.GetLabels()[karpv1.NodePoolLabelKey] != e.ObjectNew.GetLabels()[karpv1.NodePoolLabelKey] {
				enqueue(e.ObjectOld, q)
			}
		},
		DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(e.Object, q)
		},
	}
}

// Reconcile updates one NodePool.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	np := &karpv1.NodePool{}
	if err := c.Client.Get(ctx, req.NamespacedName, np); err != nil {
		if apierrors.IsNotFound(err) {
			// A deleted pool's series go with it.
			c.Metrics.PoolDeleted(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !np.DeletionTimestamp.IsZero() || !cloudprovider.Manages(c.Cloud, np.Spec.Template.Spec.NodeClassRef) {
		c.Metrics.PoolDeleted(np.Name)
		// Another provider's pool: its status is not Capstan's to write.
		return reconcile.Result{}, nil
	}
	hash, err := c.stampHash(ctx, np)
	if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	stored := np.DeepCopy()
	ncs := &karpv1.NodeClaimList{}
	// Read-only: the claims are the cache's own objects (no copy of each on every claim event).
	if err := c.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: np.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodeclaims: %w", err)
	}
	if err := c.restamp(ctx, hash, ncs.Items); err != nil {
		return reconcile.Result{}, err
	}
	setResources(np, ncs.Items)
	set := conditionSetter(np, metav1.NewTime(c.Clock.Now()))
	its, err := c.Cloud.GetInstanceTypes(ctx, np)
	if pending := (*cloudprovider.OverlaysPendingError)(nil); errors.As(err, &pending) {
		// Not the class's fault: the pool's NodeOverlays are evaluated in a moment (its cost
		// reads their prices).
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	classOK := err == nil
	if _, capped := np.Spec.Limits[spend.LimitKey]; capped && classOK {
		setSpend(np, ncs.Items, its)
	} else if !capped {
		np.Status.Spend = ""
	}
	c.record(np, ncs.Items, its)
	if classOK {
		set(karpv1.ConditionTypeNodeClassReady, true, "NodeClassReady", "")
	} else {
		set(karpv1.ConditionTypeNodeClassReady, false, "NodeClassNotReady", err.Error())
	}
	problems := nodepools.Validate(np)
	if len(problems) == 0 {
		set(karpv1.ConditionTypeValidationSucceeded, true, "ValidationSucceeded", "")
	} else {
		set(karpv1.ConditionTypeValidationSucceeded, false, "ValidationFailed", strings.Join(problems, "; "))
	}
	c.setStatic(ctx, np, set)
	ro := rollout(hash, ncs.Items)
	if ro.Done() {
		set(nodepools.ConditionTypeRolledOut, true, "RolledOut", ro.Message())
	} else {
		set(nodepools.ConditionTypeRolledOut, false, "RollingOut", ro.Message())
	}
	c.Metrics.PoolRollout(np.Name, ro.UpToDate, ro.Drifted, ro.Replacing)
	reset, err := c.registrationHealth(ctx, np)
	if err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case !classOK:
		set(karpv1.ConditionTypeReady, false, "NodeClassNotReady", "the NodeClass is not ready")
	case len(problems) > 0:
		set(karpv1.ConditionTypeReady, false, "ValidationFailed", strings.Join(problems, "; "))
	default:
		set(karpv1.ConditionTypeReady, true, "Ready", "")
	}
	if equality.Semantic.DeepEqual(stored.Status, np.Status) {
		return reconcile.Result{}, nil
	}
	// Locked on the version read: a merge patch writes the whole conditions list, and a condition
	// another writer set since must not be erased. On a conflict the pool is read again shortly.
	if err := c.Client.Status().Patch(ctx, np, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); apierrors.IsConflict(err) {
		return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
	} else if err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patching nodepool status: %w", err))
	}
	if reset && c.Health != nil {
		// Only once the condition says so: a write that conflicted leaves the record as it was.
		c.Health.Reset(np.UID)
	}
	return reconcile.Result{}, nil
}

// stampHash writes the pool's template hash and hash version as its annotations (when they
// changed) and returns the hash.
func (c *Controller) stampHash(ctx context.Context, np *karpv1.NodePool) (string, error) {
	hash := nodepools.Hash(np)
	if np.Annotations[karpv1.NodePoolHashAnnotationKey] == hash && np.Annotations[karpv1.NodePoolHashVersionAnnotationKey] == nodepools.HashVersion {
		return hash, nil
	}
	orig := np.DeepCopy()
	if np.Annotations == nil {
		np.Annotations = map[string]string{}
	}
	np.Annotations[karpv1.NodePoolHashAnnotationKey] = hash
	np.Annotations[karpv1.NodePoolHashVersionAnnotationKey] = nodepools.HashVersion
	if err := c.Client.Patch(ctx, np, client.MergeFrom(orig)); err != nil {
		return "", fmt.Errorf("annotating nodepool hash: %w", err)
	}
	return hash, nil
}

// setResources sets the pool's node count and the capacity its claims hold.
func setResources(np *karpv1.NodePool, ncs []karpv1.NodeClaim) {
	total := corev1.ResourceList{}
	for _, nc := range ncs {
		for k, q := range nc.Status.Capacity {
			cur := total[k]
			cur.Add(q)
			total[k] = cur
		}
	}
	np.Status.Nodes = int64(len(ncs))
	total[corev1.ResourceName("nodes")] = *resource.NewQuantity(np.Status.Nodes, resource.DecimalSI)
	np.Status.Resources = total
}

// setSpend sets, in the pool's resources, what its claims count against its spending limit
// (nodeclaims.Spend summed, in dollars per hour), beside the capacity they hold: kubectl and the
// karpenter_nodepools_usage metric show it next to the limit.
func setSpend(np *karpv1.NodePool, ncs []karpv1.NodeClaim, its []*cloudprovider.InstanceType) {
	var milli int64
	for i := range ncs {
		milli += spend.Milli(nodeclaims.Spend(&ncs[i], its))
	}
	np.Status.Resources[spend.LimitKey] = *resource.NewMilliQuantity(milli, resource.DecimalSI)
	limit := np.Spec.Limits[spend.LimitKey]
	np.Status.Spend = fmt.Sprintf("$%.3f/h of $%.3f/h", float64(milli)/1000, limit.AsApproximateFloat64())
}

// setCondition sets one of the pool's conditions, True when ok.
type setCondition func(t string, ok bool, reason, msg string)

// conditionSetter sets the pool's conditions at now, for its generation.
func conditionSetter(np *karpv1.NodePool, now metav1.Time) setCondition {
	return func(t string, ok bool, reason, msg string) {
		s := metav1.ConditionTrue
		if !ok {
			s = metav1.ConditionFalse
		}
		meta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
			ObservedGeneration: np.Generation, LastTransitionTime: now})
	}
}

// setStatic sets the StaticCapacity condition of a pool with replicas (and removes it from one
// without), and logs once that a static pool is ignored with the gate off.
func (c *Controller) setStatic(ctx context.Context, np *karpv1.NodePool, set setCondition) {
	switch {
	case np.Spec.Replicas == nil:
		meta.RemoveStatusCondition(&np.Status.Conditions, ConditionTypeStaticCapacity)
	case c.StaticCapacity:
		set(ConditionTypeStaticCapacity, true, "Enabled", fmt.Sprintf("Capstan keeps %d node(s)", *np.Spec.Replicas))
	default:
		msg := fmt.Sprintf("spec.replicas is %d, and the StaticCapacity feature gate is off: Capstan launches nothing for this pool (as Karpenter with the gate off)", *np.Spec.Replicas)
		set(ConditionTypeStaticCapacity, false, "FeatureGateDisabled", msg)
		if _, logged := c.warned.LoadOrStore(np.Name, true); !logged {
			log.FromContext(ctx).Info("static NodePool ignored: "+msg, "NodePool", np.Name)
		}
	}
}

// ReasonNoRecentLaunches is the reason of NodeRegistrationHealthy=Unknown: no launch since the
// pool or its NodeClass changed (or since it was created).
const ReasonNoRecentLaunches = "NoRecentLaunches"

// registrationHealth sets NodeRegistrationHealthy to Unknown when the pool has no such condition
// yet, or the pool or its NodeClass changed since the condition was written (a fix, or a new
// mistake: the launches from now on tell), and records the NodeClass generation seen. It reports
// whether the pool's registration record must be forgotten.
func (c *Controller) registrationHealth(ctx context.Context, np *karpv1.NodePool) (bool, error) {
	if c.Health == nil {
		return false, nil
	}
	class, err := nodeclasses.Get(ctx, c.Client, np)
	if err != nil {
		return false, err
	}
	gen := int64(0)
	if class != nil {
		gen = class.GetGeneration()
	}
	cond := meta.FindStatusCondition(np.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy)
	reset := cond == nil || cond.ObservedGeneration != np.Generation || np.Status.NodeClassObservedGeneration != gen
	np.Status.NodeClassObservedGeneration = gen
	if reset {
		meta.SetStatusCondition(&np.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeNodeRegistrationHealthy,
			Status: metav1.ConditionUnknown, Reason: ReasonNoRecentLaunches, Message: "no launch since the NodePool or its NodeClass changed",
			ObservedGeneration: np.Generation, LastTransitionTime: metav1.NewTime(c.Clock.Now())})
	}
	return reset, nil
}

// record publishes the pool's usage, limits and the hourly price of its launched machines.
func (c *Controller) record(np *karpv1.NodePool, claims []karpv1.NodeClaim, its []*cloudprovider.InstanceType) {
	usage, limits := map[string]float64{}, map[string]float64{}
	for k, q := range np.Status.Resources {
		usage[string(k)] = q.AsApproximateFloat64()
	}
	for k, q := range np.Spec.Limits {
		limits[string(k)] = q.AsApproximateFloat64()
	}
	cost := 0.0
	for _, nc := range claims {
		p, _ := nodeclaims.OfferingPrice(its, nc.Labels[karpv1.InstanceTypeLabelKey], nc.Labels[karpv1.ZoneLabelKey], nc.Labels[karpv1.CapacityTypeLabelKey])
		cost += p
	}
	c.Metrics.PoolStatus(np.Name, usage, limits, cost)
}

// restamp moves the pool's NodeClaims stamped by an older hash scheme to the current one, so an
// upgrade of Capstan's hashing neither rolls every machine nor stops drift detection: a claim not
// already Drifted gets the pool's current hash (it was built from the template as it is), a
// drifted one keeps its stamp and stays drifted.
func (c *Controller) restamp(ctx context.Context, hash string, claims []karpv1.NodeClaim) error {
	for i := range claims {
		if nc := &claims[i]; nc.Annotations[karpv1.NodePoolHashVersionAnnotationKey] == nodepools.HashVersion || !nc.DeletionTimestamp.IsZero() ||
			meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeDrifted) {
			continue
		}
		// The claims are the cache's: patch a copy.
		orig := claims[i].DeepCopy()
		nc := orig.DeepCopy()
		if nc.Annotations == nil {
			nc.Annotations = map[string]string{}
		}
		nc.Annotations[karpv1.NodePoolHashAnnotationKey] = hash
		nc.Annotations[karpv1.NodePoolHashVersionAnnotationKey] = nodepools.HashVersion
		if err := c.Client.Patch(ctx, nc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("restamping nodeclaim %s with hash version %s: %w", nc.Name, nodepools.HashVersion, err)
		}
	}
	return nil
}
