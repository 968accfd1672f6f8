// Package provisioningrequest answers SIG Autoscaling's ProvisioningRequests: check-capacity
// (do the pods fit on the cluster's machines now?) and best-effort-atomic-scale-up (buy the
// machines for all the pods, or none). Claims are bought through the provisioner's Exclusive, so
// that a request and a provisioning pass never plan against the same limits at once.
package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/provreq"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/volumetopology"
)

// Planner plans one caller at a time: the provisioner.
type Planner interface {
	// Prepare makes the request's pods ready for the solver as a provisioning pass makes pending
	// pods: the cluster's default topology spread, and what their volumes demand of a node. Pods
	// whose volumes are not ready are an error wrapping volumetopology.NotReadyError.
	Prepare(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error)
	// Exclusive runs fn while no provisioning pass runs, with the state a pass would read; the
	// claims fn creates go to remember.
	Exclusive(ctx context.Context, fn func(st *planning.State, remember func(*karpv1.NodeClaim)) error) error
}

// Controller reconciles ProvisioningRequests.
type Controller struct {
	Client client.Client
	// APIReader reads an attempt's claims from the API server: a cache that lags the claims just
	// created would look like claims gone, and undo the attempt.
	APIReader client.Reader
	Clock     clock.Clock
	Planner   Planner
	// WellKnownLabels are the cloud's well-known labels, as the provisioner gives the solver.
	WellKnownLabels []string
	SolverOptions   solver.Options

	// checked holds, for each check-capacity request found to fit, where its pods were placed:
	// until its booking ends, the next checks count that room taken.
	mu      sync.Mutex
	checked map[types.UID]placement
	// retries spaces the attempts of each best-effort atomic request that could not be planned
	// or launched: RetryScaleUp, doubling up to MaxRetryScaleUp.
	retries *flowcontrol.Backoff
	tried   map[types.UID]time.Time
}

// placement is where a check-capacity request's pods fit, kept until its booking ends.
type placement struct {
	name  types.NamespacedName
	until time.Time
	pods  map[string][]*corev1.Pod
}

// Retries when the answer is no (yet).
const (
	// RecheckCapacity is how soon a check-capacity request whose pods do not fit is checked again.
	RecheckCapacity = 15 * time.Second
	// RetryScaleUp is how soon a best-effort atomic request is tried again after an attempt that
	// could not be planned or launched, doubling with each such attempt up to MaxRetryScaleUp.
	RetryScaleUp    = 10 * time.Second
	MaxRetryScaleUp = 5 * time.Minute
	// launchPoll is how often an attempt's launches are looked at, besides the claims' events.
	launchPoll = 5 * time.Second
)

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "provisioningrequest" }

// Register adds the controller to a manager: requests, the claims bought for them, and the pods
// that consume them.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&autoscalingv1.ProvisioningRequest{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			p, ok := o.(*corev1.Pod)
			if !ok {
				return nil
			}
			if req, ok := provreq.Consumes(p); ok {
				return []reconcile.Request{{NamespacedName: req}}
			}
			return nil
		})).
		Watches(&karpv1.NodeClaim{}, handler.EnqueueRequestsFromMapFunc(func(_ context.Context, o client.Object) []reconcile.Request {
			ns, name, ok := strings.Cut(o.GetAnnotations()[provreq.RequestAnnotationKey], "/")
			if !ok || o.GetLabels()[provreq.RequestLabelKey] == "" {
				return nil
			}
			return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
		})).Complete(c)
}

// Reconcile answers one request.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pr := &autoscalingv1.ProvisioningRequest{}
	if err := c.Client.Get(ctx, req.NamespacedName, pr); err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted: nobody waits for its room any more.
			return reconcile.Result{}, c.release(ctx, req.NamespacedName, "")
		}
		return reconcile.Result{}, err
	}
	if !provreq.Supported(pr) || provreq.Done(pr) {
		c.succeeded(pr.UID) // nothing more is tried for it
		return reconcile.Result{}, nil
	}
	stored := pr.DeepCopy()
	now := c.Clock.Now()
	c.forgetStale(now)
	c.set(pr, autoscalingv1.ConditionAccepted, true, provreq.ReasonAccepted, "Capstan answers this class")
	res, err := c.answer(ctx, pr, now)
	if !equalStatus(stored, pr) {
		if perr := c.Client.Status().Patch(ctx, pr, client.MergeFrom(stored)); perr != nil {
			return reconcile.Result{}, errors.Join(err, fmt.Errorf("writing ProvisioningRequest %s status: %w", req.NamespacedName, perr))
		}
	}
	return res, err
}

// answer decides the request's conditions, buying or giving back machines on the way.
func (c *Controller) answer(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, now time.Time) (reconcile.Result, error) {
	if until := provreq.BookedUntil(pr); !until.IsZero() {
		if now.Before(until) {
			pods := &corev1.PodList{}
			if err := c.Client.List(ctx, pods, client.InNamespace(pr.Namespace)); err != nil {
				return reconcile.Result{}, fmt.Errorf("listing pods: %w", err)
			}
			if provreq.Consumed(pr, pods.Items) {
				if err := c.release(ctx, client.ObjectKeyFromObject(pr), pr.UID); err != nil {
					return reconcile.Result{}, err
				}
			}
			return reconcile.Result{RequeueAfter: until.Sub(now)}, nil
		}
		c.set(pr, autoscalingv1.ConditionBookingExpired, true, provreq.ReasonBookingExpired,
			fmt.Sprintf("the capacity was kept for the request's pods for %s", provreq.BookingTime))
		return reconcile.Result{}, nil
	}
	templates := &corev1.PodTemplateList{}
	if err := c.Client.List(ctx, templates, client.InNamespace(pr.Namespace)); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing podtemplates: %w", err)
	}
	byName := map[string]*corev1.PodTemplate{}
	for i := range templates.Items {
		byName[templates.Items[i].Name] = &templates.Items[i]
	}
	pods, err := provreq.Pods(pr, byName)
	if err != nil {
		c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonPodTemplate, err.Error())
		return reconcile.Result{RequeueAfter: RecheckCapacity}, nil
	}
	if pr.Spec.ProvisioningClassName == autoscalingv1.ClassCheckCapacity {
		return c.check(ctx, pr, pods, now)
	}
	return c.scaleUp(ctx, pr, pods, now)
}

// prepare makes the request's pods ready to plan (Planner.Prepare), just before a plan is made;
// ok is false when their volumes hold the request, which Provisioned then says.
func (c *Controller) prepare(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, pods []*corev1.Pod) (_ []*corev1.Pod, ok bool, _ error) {
	pods, err := c.Planner.Prepare(ctx, pods)
	if notReady := (*volumetopology.NotReadyError)(nil); errors.As(err, &notReady) {
		c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonVolumesNotReady, "waiting for volumes: "+err.Error())
		return nil, false, nil
	}
	return pods, err == nil, err
}

// check answers a check-capacity request: Provisioned when every pod fits on the cluster's
// machines (registered or on their way, less the room booked for other requests), nothing bought.
func (c *Controller) check(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, pods []*corev1.Pod, now time.Time) (reconcile.Result, error) {
	pods, ok, err := c.prepare(ctx, pr, pods)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ok {
		return reconcile.Result{RequeueAfter: RecheckCapacity}, nil
	}
	var plan *solver.Result
	err = c.Planner.Exclusive(ctx, func(st *planning.State, _ func(*karpv1.NodeClaim)) error {
		nodes := c.withChecked(st.Nodes, pr.UID, now)
		plan = solver.Solve(solver.Input{Pods: pods, Nodes: nodes, DaemonSetPods: st.DaemonSetPods, WellKnownLabels: c.WellKnownLabels}, c.SolverOptions)
		return nil
	})
	if err != nil {
		return reconcile.Result{}, err
	}
	if n := len(plan.Unschedulable); n > 0 {
		c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonCapacityNotFound,
			fmt.Sprintf("%d of %d pods do not fit on the cluster's machines: %s", n, len(pods), plan.Unschedulable[0].Reason))
		return reconcile.Result{RequeueAfter: RecheckCapacity}, nil
	}
	placed := placement{name: client.ObjectKeyFromObject(pr), until: now.Add(provreq.BookingTime), pods: map[string][]*corev1.Pod{}}
	for _, b := range plan.Bindings {
		placed.pods[b.Node] = append(placed.pods[b.Node], b.Pod)
	}
	c.mu.Lock()
	if c.checked == nil {
		c.checked = map[types.UID]placement{}
	}
	c.checked[pr.UID] = placed
	c.mu.Unlock()
	c.set(pr, autoscalingv1.ConditionProvisioned, true, provreq.ReasonCapacityIsFound,
		fmt.Sprintf("the %d pods fit on the cluster's machines; the room is kept from other requests for %s", len(pods), provreq.BookingTime))
	return reconcile.Result{RequeueAfter: provreq.BookingTime}, nil
}

// withChecked returns nodes with the pods of the other check-capacity requests whose room is
// still kept, forgetting those whose booking ended.
func (c *Controller) withChecked(nodes []solver.ExistingNode, self types.UID, now time.Time) []solver.ExistingNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := nodes
	copied := false
	for uid, pl := range c.checked {
		if !now.Before(pl.until) {
			delete(c.checked, uid)
			continue
		}
		if uid == self {
			continue
		}
		if !copied {
			out, copied = append([]solver.ExistingNode(nil), nodes...), true
		}
		for i := range out {
			if ps := pl.pods[out[i].Name]; len(ps) > 0 {
				out[i].Pods = append(append([]*corev1.Pod(nil), out[i].Pods...), ps...)
				out[i].Requested = nil
			}
		}
	}
	return out
}

// scaleUp answers a best-effort atomic request: its pods are planned together, the claims they
// need created together, and Provisioned once every one launched; a claim that could not launch
// (insufficient capacity, a launch that timed out) gives back the others, and the request is tried
// again after RetryScaleUp, until its ValidUntilSeconds.
func (c *Controller) scaleUp(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, pods []*corev1.Pod, now time.Time) (reconcile.Result, error) {
	claims := &karpv1.NodeClaimList{}
	if err := c.APIReader.List(ctx, claims, client.MatchingLabels{provreq.RequestLabelKey: string(pr.UID)}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing nodeclaims: %w", err)
	}
	validUntil, err := provreq.ValidUntil(pr)
	if err != nil {
		c.set(pr, autoscalingv1.ConditionFailed, true, provreq.ReasonInvalidParameters, err.Error())
		return reconcile.Result{}, c.giveBack(ctx, claims.Items)
	}
	if !validUntil.IsZero() && !now.Before(validUntil) {
		c.set(pr, autoscalingv1.ConditionFailed, true, provreq.ReasonValidUntilExpired,
			fmt.Sprintf("not provisioned within its %s (%s)", autoscalingv1.ParameterValidUntilSeconds, pr.Spec.Parameters[autoscalingv1.ParameterValidUntilSeconds]))
		return reconcile.Result{}, c.giveBack(ctx, claims.Items)
	}
	if len(claims.Items) > 0 {
		return c.attempt(ctx, pr, claims.Items, now)
	}
	if wait := c.waitToRetry(pr.UID, now); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	pods, ok, err := c.prepare(ctx, pr, pods)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !ok {
		return reconcile.Result{RequeueAfter: RecheckCapacity}, nil
	}
	var plan *solver.Result
	var made []*karpv1.NodeClaim
	err = c.Planner.Exclusive(ctx, func(st *planning.State, remember func(*karpv1.NodeClaim)) error {
		plan = solver.Solve(solver.Input{Pods: pods, NodePools: st.Pools, Nodes: st.Nodes, DaemonSetPods: st.DaemonSetPods,
			WellKnownLabels: c.WellKnownLabels, SpendingLeft: st.SpendingLeft}, c.SolverOptions)
		if len(plan.Unschedulable) > 0 || len(plan.NodeClaims) == 0 {
			return nil
		}
		var err error
		made, err = c.buy(ctx, pr, st, plan, now)
		for _, nc := range made {
			remember(nc)
		}
		return err
	})
	if err != nil {
		gerr := c.giveBack(ctx, derefs(made))
		c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonLaunchFailed,
			fmt.Sprintf("the machines could not all be bought (%s); those bought were given back, and the request is tried again", err))
		c.retry(pr.UID, now, validUntil)
		return reconcile.Result{}, errors.Join(err, gerr)
	}
	switch {
	case len(plan.Unschedulable) > 0:
		c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonCapacityNotFound,
			fmt.Sprintf("%d of %d pods have no place: %s", len(plan.Unschedulable), len(pods), plan.Unschedulable[0].Reason))
		return c.retry(pr.UID, now, validUntil), nil
	case len(made) == 0:
		c.succeeded(pr.UID)
		c.set(pr, autoscalingv1.ConditionProvisioned, true, provreq.ReasonProvisioned,
			fmt.Sprintf("the %d pods fit on the cluster's machines; no machine was needed", len(pods)))
		return reconcile.Result{RequeueAfter: provreq.BookingTime}, nil
	}
	log.FromContext(ctx).Info("buying machines for provisioning request", "ProvisioningRequest", client.ObjectKeyFromObject(pr), "nodeclaims", len(made), "pods", len(pods))
	c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonProvisioning, fmt.Sprintf("launching %d machines for %d pods", len(made), len(pods)))
	return reconcile.Result{RequeueAfter: launchPoll}, nil
}

// buy creates the plan's claims, labelled as the request's attempt and booked from now; it
// returns those created, and on an error the caller gives them back.
func (c *Controller) buy(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, st *planning.State, plan *solver.Result, now time.Time) ([]*karpv1.NodeClaim, error) {
	var made []*karpv1.NodeClaim
	for _, planned := range plan.NodeClaims {
		np := st.ByName[planned.NodePool]
		nc := planning.NewNodeClaim(np, planned)
		nc.Labels[provreq.RequestLabelKey] = string(pr.UID)
		if nc.Annotations == nil {
			nc.Annotations = map[string]string{}
		}
		nc.Annotations[provreq.RequestAnnotationKey] = pr.Namespace + "/" + pr.Name
		nc.Annotations[provreq.ClaimsAnnotationKey] = strconv.Itoa(len(plan.NodeClaims))
		nc.Annotations[provreq.BookedUntilAnnotationKey] = now.Add(provreq.BookingTime).UTC().Format(time.RFC3339)
		nc.Name = claimstore.NewName(np.Name)
		if err := claimstore.Create(ctx, c.Client, c.Client, c.Clock, nc); err != nil {
			if claimstore.IsUnresolved(err) {
				made = append(made, nc)
			}
			return made, fmt.Errorf("creating nodeclaim for ProvisioningRequest %s/%s: %w", pr.Namespace, pr.Name, err)
		}
		made = append(made, nc)
	}
	return made, nil
}

// attempt follows the claims of an attempt: all launched, the request is Provisioned and the
// claims booked for BookingTime from now; one gone (deleted unlaunched) or failed, the others are
// given back.
func (c *Controller) attempt(ctx context.Context, pr *autoscalingv1.ProvisioningRequest, claims []karpv1.NodeClaim, now time.Time) (reconcile.Result, error) {
	want, _ := strconv.Atoi(claims[0].Annotations[provreq.ClaimsAnnotationKey])
	want = max(want, len(claims))
	launched, gone := 0, 0
	for i := range claims {
		nc := &claims[i]
		switch {
		case !nc.DeletionTimestamp.IsZero():
			gone++
		case meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeLaunched):
			launched++
		}
	}
	gone += max(0, want-len(claims))
	validUntil, _ := provreq.ValidUntil(pr)
	switch {
	case gone > 0:
		if err := c.giveBack(ctx, claims); err != nil {
			return reconcile.Result{}, err
		}
		log.FromContext(ctx).Info("giving back the machines of a provisioning request", "ProvisioningRequest", client.ObjectKeyFromObject(pr),
			"nodeclaims", want, "failed", gone)
		c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonLaunchFailed,
			fmt.Sprintf("%d of %d machines could not be launched; the others were given back, and the request is tried again", gone, want))
		return c.retry(pr.UID, now, validUntil), nil
	case launched == want:
		until := now.Add(provreq.BookingTime).UTC().Format(time.RFC3339)
		for i := range claims {
			nc := &claims[i]
			if nc.Annotations[provreq.BookedUntilAnnotationKey] == until {
				continue
			}
			stored := nc.DeepCopy()
			nc.Annotations[provreq.BookedUntilAnnotationKey] = until
			if err := c.Client.Patch(ctx, nc, client.MergeFrom(stored)); client.IgnoreNotFound(err) != nil {
				return reconcile.Result{}, fmt.Errorf("booking nodeclaim %s: %w", nc.Name, err)
			}
		}
		c.succeeded(pr.UID)
		c.set(pr, autoscalingv1.ConditionProvisioned, true, provreq.ReasonProvisioned,
			fmt.Sprintf("%d machines launched for the request's pods; kept for them for %s", want, provreq.BookingTime))
		return reconcile.Result{RequeueAfter: provreq.BookingTime}, nil
	}
	c.set(pr, autoscalingv1.ConditionProvisioned, false, provreq.ReasonProvisioning, fmt.Sprintf("%d of %d machines launched", launched, want))
	return reconcile.Result{RequeueAfter: launchPoll}, nil
}

// retry records an attempt that did not succeed and says when the next is due: after RetryScaleUp
// for the first, doubling up to MaxRetryScaleUp, or at the request's ValidUntilSeconds when sooner.
func (c *Controller) retry(uid types.UID, now, validUntil time.Time) reconcile.Result {
	c.mu.Lock()
	if c.retries == nil {
		c.retries = flowcontrol.NewBackOff(RetryScaleUp, MaxRetryScaleUp)
		c.retries.Clock = c.Clock
	}
	if !c.retries.IsInBackOffSinceUpdate(string(uid), now) {
		c.retries.Next(string(uid), now)
		if c.tried == nil {
			c.tried = map[types.UID]time.Time{}
		}
		c.tried[uid] = now
	}
	after := c.tried[uid].Add(c.retries.Get(string(uid))).Sub(now)
	c.mu.Unlock()
	if !validUntil.IsZero() && validUntil.Sub(now) < after {
		after = max(validUntil.Sub(now), time.Second)
	}
	return reconcile.Result{RequeueAfter: after}
}

// waitToRetry is how long the request's last attempt that did not succeed still holds off the
// next (0: none).
func (c *Controller) waitToRetry(uid types.UID, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retries == nil || !c.retries.IsInBackOffSinceUpdate(string(uid), now) {
		return 0
	}
	return max(c.tried[uid].Add(c.retries.Get(string(uid))).Sub(now), time.Millisecond)
}

// forgetStale drops what is remembered of attempts made longer ago than twice the longest wait
// between them (flowcontrol.Backoff.GC's horizon): those of a request deleted, or ended, before
// one succeeded. Memory does not grow with the requests that come and go.
func (c *Controller) forgetStale(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retries != nil {
		c.retries.GC()
	}
	for uid, at := range c.tried {
		if now.Sub(at) > 2*MaxRetryScaleUp {
			delete(c.tried, uid)
		}
	}
}

// remembered counts the requests whose failed attempts are remembered.
func (c *Controller) remembered() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tried)
}

// succeeded forgets the request's attempts that did not succeed.
func (c *Controller) succeeded(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.retries != nil {
		c.retries.Reset(string(uid))
	}
	delete(c.tried, uid)
}

// release ends the booking of a request whose pods all bound, or that was deleted: its claims
// (those of the attempt uid, or every claim naming it when uid is empty) lose their booking and are
// machines like any other, and a check-capacity request's room is no longer kept from others.
func (c *Controller) release(ctx context.Context, name types.NamespacedName, uid types.UID) error {
	c.mu.Lock()
	for u, pl := range c.checked {
		if u == uid || (uid == "" && pl.name == name) {
			delete(c.checked, u)
		}
	}
	c.mu.Unlock()
	claims := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, claims, client.HasLabels{provreq.RequestLabelKey}); err != nil {
		return fmt.Errorf("listing nodeclaims: %w", err)
	}
	var errs []error
	for i := range claims.Items {
		nc := &claims.Items[i]
		if nc.Annotations[provreq.BookedUntilAnnotationKey] == "" || nc.Annotations[provreq.RequestAnnotationKey] != name.String() ||
			(uid != "" && nc.Labels[provreq.RequestLabelKey] != string(uid)) {
			continue
		}
		stored := nc.DeepCopy()
		delete(nc.Annotations, provreq.BookedUntilAnnotationKey)
		if err := c.Client.Patch(ctx, nc, client.MergeFrom(stored)); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("releasing nodeclaim %s: %w", nc.Name, err))
			continue
		}
		log.FromContext(ctx).Info("released a machine booked for a provisioning request", "ProvisioningRequest", name, "nodeclaim", nc.Name)
	}
	return errors.Join(errs...)
}

// giveBack deletes the claims (their machines, launched or not, are terminated).
func (c *Controller) giveBack(ctx context.Context, claims []karpv1.NodeClaim) error {
	var errs []error
	for i := range claims {
		if !claims[i].DeletionTimestamp.IsZero() {
			continue
		}
		if err := c.Client.Delete(ctx, &claims[i]); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("deleting nodeclaim %s: %w", claims[i].Name, err))
		}
	}
	return errors.Join(errs...)
}

// set sets a condition of the request, its transition time now when its status changes.
func (c *Controller) set(pr *autoscalingv1.ProvisioningRequest, t string, ok bool, reason, msg string) {
	s := metav1.ConditionFalse
	if ok {
		s = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&pr.Status.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: msg,
		ObservedGeneration: pr.Generation, LastTransitionTime: metav1.NewTime(c.Clock.Now())})
}

func equalStatus(a, b *autoscalingv1.ProvisioningRequest) bool {
	if len(a.Status.Conditions) != len(b.Status.Conditions) {
		return false
	}
	for _, ca := range a.Status.Conditions {
		cb := meta.FindStatusCondition(b.Status.Conditions, ca.Type)
		if cb == nil || cb.Status != ca.Status || cb.Reason != ca.Reason || cb.Message != ca.Message {
			return false
		}
	}
	return true
}

func derefs(ncs []*karpv1.NodeClaim) []karpv1.NodeClaim {
	out := make([]karpv1.NodeClaim, 0, len(ncs))
	for _, nc := range ncs {
		out = append(out, *nc)
	}
	return out
}
