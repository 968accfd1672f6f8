// Package static keeps each static NodePool — one with spec.replicas, Karpenter's StaticCapacity
// gate — at exactly its replica count whatever the pods: it launches NodeClaims from the pool's
// template when there are fewer, removes the ones that cost least to remove when there are more
// (`kubectl scale nodepool NAME --replicas N`), and replaces drifted nodes one at a time within
// the pool's Drifted budget. Expired and interrupted nodes are deleted by their own controllers
// and refilled here. Static pools are never consolidated and pending pods never buy machines from
// them (the decision core and the solver leave them out).
package static

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/registration"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// Controller reconciles static NodePools.
type Controller struct {
	Client client.Client
	// APIReader reads the pool's NodeClaims from the API server, not the cache: a count that
	// missed the controller's own recent creates would launch them again.
	APIReader client.Reader
	Cloud     cloudprovider.CloudProvider
	Clock     clock.Clock
	// Recorder and Metrics may be nil.
	Recorder events.EventRecorder
	Metrics  *metrics.Metrics
	// NodeRepair is the NodeRepair feature gate; RepairPolicies the conditions it acts on
	// (disruptionplan.DefaultRepairPolicies when nil).
	NodeRepair     bool
	RepairPolicies []disruptionplan.RepairPolicy
	// TerminateFirstDrift is the gate of that name: a drifted node holding a machine of a
	// capacity reservation, in a pool that has no other machine to launch its replacement on, is
	// deleted before the replacement is launched.
	TerminateFirstDrift bool
}

// Pauses between reconciles of a static pool.
const (
	// Resync is the pause when the pool is at its count.
	Resync = time.Minute
	// Waiting is the pause while a change is under way (a replacement initialising, a node
	// limit reached).
	Waiting = 5 * time.Second
)

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodepool.static" }

// Register adds the controller to a manager: static NodePools, and their NodeClaims' changes.
func (c *Controller) Register(mgr ctrl.Manager) error {
	isStatic := predicate.NewPredicateFuncs(func(o client.Object) bool {
		np, ok := o.(*karpv1.NodePool)
		return ok && np.Spec.Replicas != nil
	})
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).
		For(&karpv1.NodePool{}, builder.WithPredicates(isStatic)).
		Watches(&karpv1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			if np := o.GetLabels()[karpv1.NodePoolLabelKey]; np != "" {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: np}}}
			}
			return nil
		})).Complete(c)
}

// Reconcile brings one static pool to its replica count, or one drifted node nearer replacement.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	np := &karpv1.NodePool{}
	if err := c.Client.Get(ctx, req.NamespacedName, np); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if np.Spec.Replicas == nil || !np.DeletionTimestamp.IsZero() || !cloudprovider.Manages(c.Cloud, np.Spec.Template.Spec.NodeClassRef) {
		return reconcile.Result{}, nil
	}
	list := &karpv1.NodeClaimList{}
	if err := c.APIReader.List(ctx, list, client.MatchingLabels{karpv1.NodePoolLabelKey: np.Name}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodeclaims of nodepool %s: %w", np.Name, err)
	}
	var live []*karpv1.NodeClaim
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			live = append(live, &list.Items[i])
		}
	}
	replicas := int(*np.Spec.Replicas)
	// Every claim counts against limits.nodes until it is gone, deleting ones too: the limit
	// is what the pool may run at any moment.
	room := math.MaxInt
	if q, ok := nodepools.Bounded(np.Spec.Limits)[karpv1.ResourceNodes]; ok {
		room = max(0, int(q.Value())-len(list.Items))
	}
	switch {
	case len(live) < replicas:
		return c.launch(ctx, np, list.Items, min(replicas-len(live), room), replicas-len(live))
	case len(live) > replicas:
		return c.remove(ctx, np, live, len(live)-replicas)
	}
	if c.NodeRepair {
		if res, acted, err := c.repair(ctx, np, live, len(list.Items)-len(live)); acted || err != nil {
			return res, err
		}
	}
	return c.replaceDrifted(ctx, np, list.Items, live, len(list.Items)-len(live), room)
}

// repair deletes the static pool's node unhealthy longest past its repair policy's toleration,
// under the rules the decision core applies to dynamic pools: not a node marked
// karpenter.sh/do-not-repair, none while more than disruptionplan.RepairUnhealthyShare of the pool is
// unhealthy, within the pool's Unhealthy budget. The pool is refilled at its next reconcile (a
// static pool's replacement is its count; its termination drains the node as any other). acted
// says a node was deleted or is waited for.
func (c *Controller) repair(ctx context.Context, np *karpv1.NodePool, live []*karpv1.NodeClaim, deleting int) (reconcile.Result, bool, error) {
	policies := c.RepairPolicies
	if policies == nil {
		policies = disruptionplan.DefaultRepairPolicies
	}
	now := c.Clock.Now()
	type due struct {
		nc     *karpv1.NodeClaim
		node   *corev1.Node
		policy disruptionplan.RepairPolicy
		since  time.Time
	}
	var sick []due
	unhealthy := 0
	for _, nc := range live {
		if nc.Status.NodeName == "" {
			continue
		}
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, node); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return reconcile.Result{}, false, err
		}
		p, since, ok := disruptionplan.MatchRepair(node, policies)
		if !ok {
			continue
		}
		unhealthy++
		if now.Sub(since) >= p.Toleration {
			sick = append(sick, due{nc, node, p, since})
		}
	}
	if len(sick) == 0 {
		return reconcile.Result{}, false, nil
	}
	slices.SortStableFunc(sick, func(a, b due) int { return a.since.Compare(b.since) })
	if why := disruptionplan.CorrelatedFailure(np.Name, unhealthy, len(live)); why != "" {
		c.event(np, corev1.EventTypeWarning, disruptionplan.EventNodeRepairBlocked, "Repair", why)
		return reconcile.Result{RequeueAfter: Resync}, false, nil
	}
	for _, u := range sick {
		what := fmt.Sprintf("nodeclaim %s: %s=%s for %s", u.nc.Name, u.policy.ConditionType, u.policy.ConditionStatus, now.Sub(u.since).Round(time.Second))
		if u.node.Annotations[karpv1.DoNotRepairAnnotationKey] == "true" {
			c.event(np, corev1.EventTypeNormal, disruptionplan.EventDisruptionBlocked, "Repair", what+", but the node has "+karpv1.DoNotRepairAnnotationKey)
			continue
		}
		if a := disruptionplan.PoolAllowance(np, karpv1.DisruptionReasonUnhealthy, now, len(live), deleting); a.Allowed < 1 {
			c.event(np, corev1.EventTypeNormal, disruptionplan.EventDisruptionBlocked, "Repair", what+", but the NodePool's Unhealthy budget allows no disruption now")
			return reconcile.Result{RequeueAfter: Resync}, true, nil
		}
		log.FromContext(ctx).Info("repairing a static nodeclaim: deleting it, the pool is refilled after", "NodePool", np.Name, "NodeClaim", u.nc.Name,
			"condition", string(u.policy.ConditionType)+"="+string(u.policy.ConditionStatus))
		c.event(np, corev1.EventTypeNormal, "Repairing", "Repair", "repairing "+what)
		if err := c.Client.Delete(ctx, u.nc); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, true, fmt.Errorf("deleting unhealthy nodeclaim %s: %w", u.nc.Name, err)
		}
		return reconcile.Result{RequeueAfter: Waiting}, true, nil
	}
	return reconcile.Result{}, false, nil
}

// launch creates n NodeClaims from the pool's template (want of them were needed); own are the
// pool's claims, being deleted or not, as the API server has them.
func (c *Controller) launch(ctx context.Context, np *karpv1.NodePool, own []karpv1.NodeClaim, n, want int) (reconcile.Result, error) {
	if n <= 0 {
		c.event(np, corev1.EventTypeWarning, "NodeLimitReached", "Launch",
			fmt.Sprintf("static NodePool needs %d more node(s) to reach %d replicas, and limits.nodes leaves room for none", want, *np.Spec.Replicas))
		return reconcile.Result{RequeueAfter: Waiting}, nil
	}
	p, err := c.plan(ctx, np, own, n)
	if err != nil {
		return reconcile.Result{}, err
	}
	return c.create(ctx, np, p.claims, n, want)
}

// create creates a NodeClaim of each of claims' requirements; n were asked for, want needed.
func (c *Controller) create(ctx context.Context, np *karpv1.NodePool, claims []requirements.Requirements, n, want int) (reconcile.Result, error) {
	for _, reqs := range claims {
		// No pods and no instance types: the cloud launches the cheapest type the requirements
		// allow, as Karpenter does for static pools.
		nc := planning.NewNodeClaim(np, &solver.PlannedNodeClaim{NodePool: np.Name, Requirements: reqs})
		nc.Annotations[planning.LaunchedForAnnotationKey] = fmt.Sprintf("static NodePool %s keeps %d replicas", np.Name, *np.Spec.Replicas)
		if err := claimstore.Create(ctx, c.Client, c.APIReader, c.Clock, nc); err != nil {
			return reconcile.Result{}, fmt.Errorf("creating nodeclaim for static nodepool %s: %w", np.Name, err)
		}
		c.Metrics.Created(np.Name, metrics.ReasonProvisioned, false)
		log.FromContext(ctx).Info("created nodeclaim", "NodePool", np.Name, "NodeClaim", nc.Name, "replicas", *np.Spec.Replicas,
			"reservation", cloudprovider.PinnedReservation(nc))
	}
	if short := n - len(claims); short > 0 {
		c.event(np, corev1.EventTypeWarning, EventReservationsFull, "Launch",
			fmt.Sprintf("static NodePool needs %d more node(s) to reach %d replicas: its capacity reservations have no machine left, and its requirements allow no other capacity", short, *np.Spec.Replicas))
		return reconcile.Result{RequeueAfter: Waiting}, nil
	}
	if n < want {
		return reconcile.Result{RequeueAfter: Waiting}, nil
	}
	return reconcile.Result{RequeueAfter: Resync}, nil
}

// EventReservationsFull is the NodePool event of a static pool that may launch only into
// capacity reservations (capacity type reserved alone, or a reservation asked for by id) when
// they have no machine left for its missing nodes.
const EventReservationsFull = "ReservationsFull"

// launchPlan is the requirements of the claims a static pool can launch now, and the capacity
// reservations its pool is offered (whether or not they have a machine left).
type launchPlan struct {
	claims  []requirements.Requirements
	offered map[string]bool
}

// plan gives each of n new claims of the pool a machine of one of its capacity reservations,
// the cheapest offering first, when its template allows capacity type reserved: the claim is
// pinned to it (capacity type reserved, the reservation's zone, type and id), as the solver pins
// a dynamic pool's claims — the provider launches into a reservation only a claim that names it.
// A reservation's machines are counted by the NodeClaims pinned to it: own, the pool's, as the
// API server has them, and the other pools' from the cache. A claim that finds no machine left
// is kept off reserved offerings when the template allows another capacity type the pool is
// offered, and not planned otherwise (fewer claims than n).
func (c *Controller) plan(ctx context.Context, np *karpv1.NodePool, own []karpv1.NodeClaim, n int) (launchPlan, error) {
	reqs, err := nodepools.Requirements(np)
	if err != nil {
		return launchPlan{}, err
	}
	reqs.Add(requirements.Single(karpv1.NodePoolLabelKey, np.Name))
	p := launchPlan{offered: map[string]bool{}}
	ct, hasCT := reqs.Get(karpv1.CapacityTypeLabelKey)
	if hasCT && !ct.Allows(karpv1.CapacityTypeReserved) {
		for range n {
			p.claims = append(p.claims, reqs)
		}
		return p, nil
	}
	its, err := c.Cloud.GetInstanceTypes(ctx, np)
	if err != nil {
		return launchPlan{}, fmt.Errorf("instance types of static nodepool %s: %w", np.Name, err)
	}
	all := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, all); err != nil {
		return launchPlan{}, fmt.Errorf("listing nodeclaims: %w", err)
	}
	claims := slices.DeleteFunc(all.Items, func(nc karpv1.NodeClaim) bool { return nc.Labels[karpv1.NodePoolLabelKey] == np.Name })
	its = cloudprovider.LessPinned(its, append(claims, own...))
	zone, hasZone := reqs.Get(karpv1.ZoneLabelKey)
	rid, hasRID := reqs.Get(cloudprovider.ReservationIDLabelKey)
	type reserved struct {
		it string
		o  cloudprovider.Offering
	}
	var offers []reserved
	left := map[string]int{}
	other := false
	for _, it := range its {
		if it.Requirements.Intersects(reqs) != nil {
			continue
		}
		for _, o := range it.Offerings {
			switch {
			case hasZone && !zone.Allows(o.Zone):
			case o.ReservationID == "":
				other = other || !hasCT || ct.Allows(o.CapacityType)
			case hasRID && !rid.Allows(o.ReservationID):
			default:
				p.offered[o.ReservationID] = true
				if o.Available && o.ReservationCapacity > 0 {
					offers = append(offers, reserved{it.Name, o})
					left[o.ReservationID] = o.ReservationCapacity
				}
			}
		}
	}
	slices.SortFunc(offers, func(a, b reserved) int {
		return cmp.Or(cmp.Compare(a.o.Price, b.o.Price), cmp.Compare(a.it, b.it), cmp.Compare(a.o.ReservationID, b.o.ReservationID))
	})
	for range n {
		i := slices.IndexFunc(offers, func(r reserved) bool { return left[r.o.ReservationID] > 0 })
		if i < 0 {
			break
		}
		r := offers[i]
		left[r.o.ReservationID]--
		pinned := reqs.Clone()
		cloudprovider.PinReservation(&pinned, r.it, r.o)
		p.claims = append(p.claims, pinned)
	}
	if len(p.claims) < n && other && !hasRID {
		off := reqs.Clone()
		off.Add(requirements.MustNew(karpv1.CapacityTypeLabelKey, requirements.NotIn, karpv1.CapacityTypeReserved))
		for len(p.claims) < n {
			p.claims = append(p.claims, off)
		}
	}
	return p, nil
}

// remove deletes n of the live claims, those that cost least to remove first: drifted ones, then
// ones not launched yet, not initialised, then nodes without a pod that karpenter.sh/do-not-disrupt
// protects before those with one (as Karpenter: the scale-in takes others first), empty, and
// holding the fewest pods. A claim with a node is deleted only once every claim staying is
// initialised, so a replacement is up before the node it replaces goes.
func (c *Controller) remove(ctx context.Context, np *karpv1.NodePool, live []*karpv1.NodeClaim, n int) (reconcile.Result, error) {
	// held counts the pods that would move; protected is 1 for a node with a pod do-not-disrupt
	// protects (a sort key: those go last).
	held, protected := map[string]int{}, map[string]int{}
	now := c.Clock.Now()
	for _, nc := range live {
		if nc.Status.NodeName == "" {
			continue
		}
		l := &corev1.PodList{}
		if err := c.Client.List(ctx, l, client.MatchingFields{"spec.nodeName": nc.Status.NodeName}); err != nil {
			return reconcile.Result{}, fmt.Errorf("listing pods of node %s: %w", nc.Status.NodeName, err)
		}
		for i := range l.Items {
			p := &l.Items[i]
			if pods.Reschedulable(p) {
				held[nc.Name]++
			}
			if p.DeletionTimestamp.IsZero() && pods.DoNotDisrupt(p, now) {
				protected[nc.Name] = 1
			}
		}
	}
	rank := func(nc *karpv1.NodeClaim) int {
		switch {
		case drifted(nc):
			return 0
		case nc.Status.ProviderID == "":
			return 1
		case !initialized(nc):
			return 2
		}
		return 3
	}
	slices.SortStableFunc(live, func(a, b *karpv1.NodeClaim) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(protected[a.Name], protected[b.Name]), cmp.Compare(held[a.Name], held[b.Name]), cmp.Compare(a.Name, b.Name))
	})
	victims, staying := live[:n], live[n:]
	for _, nc := range victims {
		if nc.Status.ProviderID == "" {
			continue
		}
		for _, s := range staying {
			if !initialized(s) {
				// A replacement still starting: the node it replaces stays until it is up.
				return reconcile.Result{RequeueAfter: Waiting}, nil
			}
		}
	}
	for _, nc := range victims {
		if err := c.Client.Delete(ctx, nc); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("deleting nodeclaim %s of static nodepool %s: %w", nc.Name, np.Name, err)
		}
		log.FromContext(ctx).Info("deleted nodeclaim", "NodePool", np.Name, "NodeClaim", nc.Name, "replicas", *np.Spec.Replicas,
			"drifted", drifted(nc), "pods", held[nc.Name])
	}
	return reconcile.Result{RequeueAfter: Resync}, nil
}

// replaceDrifted starts replacing the longest-drifted node when the pool is at its count, settled
// (nothing starting or going) and its Drifted budget allows one: it launches the replacement
// first, and remove deletes the drifted node once the replacement is initialised. When
// limits.nodes leaves no room for the extra node (limits.nodes == replicas, aws#8873), or, with
// TerminateFirstDrift, the replacement could only launch into the capacity reservation machine
// the drifted node holds, the drifted node is deleted first and the pool refilled after; without
// the gate such a replacement waits for a machine of the reservations (DisruptionBlocked).
func (c *Controller) replaceDrifted(ctx context.Context, np *karpv1.NodePool, own []karpv1.NodeClaim, live []*karpv1.NodeClaim, deleting, room int) (reconcile.Result, error) {
	var oldest *karpv1.NodeClaim
	for _, nc := range live {
		if !initialized(nc) {
			return reconcile.Result{RequeueAfter: Waiting}, nil
		}
		if drifted(nc) && (oldest == nil || driftedAt(nc).Before(driftedAt(oldest))) {
			oldest = nc
		}
	}
	if oldest == nil || deleting > 0 {
		return reconcile.Result{RequeueAfter: Resync}, nil
	}
	if registration.Unhealthy(np) {
		// Its replacement would likely not register either; deleting first would lose the node.
		c.event(np, corev1.EventTypeNormal, "DisruptionBlocked", "Drift",
			fmt.Sprintf("drifted nodeclaim %s waits: the NodePool's recent launches did not register (%s=False)", oldest.Name, karpv1.ConditionTypeNodeRegistrationHealthy))
		return reconcile.Result{RequeueAfter: Resync}, nil
	}
	a := disruptionplan.PoolAllowance(np, karpv1.DisruptionReasonDrifted, c.Clock.Now(), len(live), deleting)
	if a.Allowed < 1 {
		c.event(np, corev1.EventTypeNormal, "DisruptionBlocked", "Drift",
			fmt.Sprintf("drifted nodeclaim %s waits: the NodePool's Drifted budget allows no disruption now", oldest.Name))
		return reconcile.Result{RequeueAfter: Resync}, nil
	}
	why := "limits.nodes leaves no room for its replacement"
	if room >= 1 {
		p, err := c.plan(ctx, np, own, 1)
		if err != nil {
			return reconcile.Result{}, err
		}
		if len(p.claims) == 1 {
			return c.create(ctx, np, p.claims, 1, 1)
		}
		id := cloudprovider.PinnedReservation(oldest)
		if !c.TerminateFirstDrift || !p.offered[id] {
			c.event(np, corev1.EventTypeNormal, "DisruptionBlocked", "Drift",
				fmt.Sprintf("drifted nodeclaim %s waits: its replacement has no machine (the capacity reservations are full, and the NodePool's requirements allow no other capacity)", oldest.Name))
			return reconcile.Result{RequeueAfter: Waiting}, nil
		}
		// Its reservation's machine is the only one the replacement could have.
		why = "its replacement can only launch into capacity reservation " + id + "'s machine it holds (TerminateFirstDrift)"
	}
	log.FromContext(ctx).Info("replacing a drifted nodeclaim by deleting it first: "+why, "NodePool", np.Name, "NodeClaim", oldest.Name)
	if err := c.Client.Delete(ctx, oldest); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, fmt.Errorf("deleting drifted nodeclaim %s: %w", oldest.Name, err)
	}
	return reconcile.Result{RequeueAfter: Waiting}, nil
}

func (c *Controller) event(np *karpv1.NodePool, typ, reason, action, msg string) {
	if c.Recorder != nil {
		c.Recorder.Eventf(np, nil, typ, reason, action, "%s", msg)
	}
}

func drifted(nc *karpv1.NodeClaim) bool {
	return meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeDrifted)
}

func driftedAt(nc *karpv1.NodeClaim) time.Time {
	return meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeDrifted).LastTransitionTime.Time
}

func initialized(nc *karpv1.NodeClaim) bool {
	return meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized)
}
