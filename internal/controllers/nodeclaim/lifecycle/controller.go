package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/crashpoint"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/ownwrites"
	"capstan.dev/capstan/internal/registration"
)

// RegistrationTTL is how long a launched machine may take to register before its claim is
// deleted.
const RegistrationTTL = 15 * time.Minute

// LaunchTTL is how long a claim may keep failing to launch before it is deleted, so that its
// pods are planned elsewhere and it stops holding its NodePool's limits (Karpenter's value).
const LaunchTTL = 5 * time.Minute

// launchRetry bounds the wait between launch attempts of a failing claim.
const launchRetry = 10 * time.Second

// Workers is how many claims are reconciled at once: a burst's claims launch and register side
// by side (one at a time, 200 claims took 40 s to launch on the simulated cloud), and a cloud's
// launch call may take seconds. Each claim is still reconciled by one worker at a time.
const Workers = 64

// Controller reconciles NodeClaims through their lifecycle.
type Controller struct {
	Client   client.Client
	Cloud    cloudprovider.CloudProvider
	Clock    clock.Clock
	Recorder events.EventRecorder
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Launches, shared with termination, marks claims whose launch is in flight; may be nil.
	Launches *nodeclaims.Launches
	// Nominated names the pending pods planned onto a claim (the provisioner), told when the
	// claim meets insufficient capacity; nil tells none.
	Nominated interface {
		PodsNominatedTo(claim string) []types.NamespacedName
	}
	// Health, shared with the NodePool status controller, records whether each pool's launches
	// register nodes (NodeRegistrationHealthy); nil records nothing.
	Health *registration.Tracker

	// iceEvents bounds the pods' InsufficientCapacityError events (tellNominatedPods).
	iceEvents     flowcontrol.PassiveRateLimiter
	iceEventsOnce sync.Once
	// unmanaged holds the UIDs of claims of another provider's NodeClass kind already reported.
	unmanaged sync.Map
	// written tells reads of a claim from before this controller's own last write (the cache
	// lags); acting on them would launch, patch and report again what is done.
	written     *ownwrites.Tracker
	writtenOnce sync.Once
}

// staleRetry is when a claim read from before the controller's own write is looked at again, if
// the write's watch event has not triggered it first.
const staleRetry = 2 * time.Second

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.lifecycle" }

// Register adds the controller to a manager: it watches NodeClaims and the Nodes that register
// for them.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(c.Name()).
		For(&karpv1.NodeClaim{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(claimstore.ClaimForNode(c.Client))).
		WithOptions(controller.Options{MaxConcurrentReconciles: Workers}).
		Complete(c)
}

// Reconcile advances one NodeClaim.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c.writtenOnce.Do(func() { c.written = ownwrites.New(c.Clock) })
	nc := &karpv1.NodeClaim{}
	if err := c.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !nc.DeletionTimestamp.IsZero() {
		c.written.Forget(nc.UID)
		return reconcile.Result{}, nil
	}
	if c.written.Stale(nc) {
		log.FromContext(ctx).V(1).Info("nodeclaim read from before its last write; waiting for the cache")
		return reconcile.Result{RequeueAfter: staleRetry}, nil
	}
	if !cloudprovider.Manages(c.Cloud, nc.Spec.NodeClassRef) {
		c.reportUnmanaged(ctx, nc)
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(nc, karpv1.TerminationFinalizer) {
		orig := nc.DeepCopy()
		controllerutil.AddFinalizer(nc, karpv1.TerminationFinalizer)
		// A merge patch writes the whole list: locked on the version read, so that a finalizer
		// another writer added since is never dropped.
		if err := c.Client.Patch(ctx, nc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			if apierrors.IsConflict(err) {
				return reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
			}
			return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("adding finalizer: %w", err))
		}
		c.written.Wrote(nc, orig.ResourceVersion)
	}
	stored := nc.DeepCopy()
	if !isTrue(nc, karpv1.ConditionTypeLaunched) {
		// Until the launch's result is saved on the claim, termination must not let the claim go.
		c.Launches.Begin(nc.Name)
		defer c.Launches.End(nc.Name)
	}
	result, err := c.advance(ctx, nc)
	if !nc.DeletionTimestamp.IsZero() {
		return result, err
	}
	// Metadata first (labels merge by key; nothing is erased), so that whoever sees the new
	// status sees the labels it describes; then status, checked against the version read. Each
	// patch overwrites the object it is given with the server's answer, so each gets a copy.
	// Status is saved even when a step failed: a failed launch's condition must be seen.
	base := stored
	if !equalMeta(stored, nc) {
		written := nc.DeepCopy()
		if perr := c.Client.Patch(ctx, written, client.MergeFrom(stored)); perr != nil {
			return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patching nodeclaim: %w", errors.Join(err, perr)))
		}
		c.written.Wrote(written, stored.ResourceVersion)
		if !equalStatus(stored, written) {
			// Someone else wrote the status since it was read: read the claim again (an error
			// of the step retries with back-off; controller-runtime ignores RequeueAfter with it).
			if err != nil {
				return reconcile.Result{}, err
			}
			return reconcile.Result{RequeueAfter: time.Second}, nil
		}
		base = stored.DeepCopy()
		base.ResourceVersion = written.ResourceVersion
	}
	if !equalStatus(stored, nc) {
		written, res, perr := claimstore.PatchStatusWritten(ctx, c.Client, nc, base)
		if perr != nil || res.RequeueAfter > 0 {
			return res, errors.Join(err, perr)
		}
		if written != nil {
			c.written.Wrote(written, base.ResourceVersion)
		}
	}
	return result, err
}

func equalMeta(a, b *karpv1.NodeClaim) bool {
	return maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) && slices.Equal(a.Finalizers, b.Finalizers)
}

func equalStatus(a, b *karpv1.NodeClaim) bool {
	return a.Status.NodeName == b.Status.NodeName && a.Status.ProviderID == b.Status.ProviderID &&
		a.Status.ImageID == b.Status.ImageID && len(a.Status.Capacity) == len(b.Status.Capacity) && nodeclaims.ConditionsEqual(a, b)
}

// advance runs the steps in order; each returns done=false when the claim must wait.
func (c *Controller) advance(ctx context.Context, nc *karpv1.NodeClaim) (reconcile.Result, error) {
	for _, step := range []func(context.Context, *karpv1.NodeClaim) (bool, reconcile.Result, error){c.launch, c.register, c.initialize} {
		done, result, err := step(ctx, nc)
		if err != nil || !done {
			return result, err
		}
	}
	c.setCondition(nc, karpv1.ConditionTypeReady, metav1.ConditionTrue, "Ready", "")
	return reconcile.Result{}, nil
}

func isTrue(nc *karpv1.NodeClaim, t string) bool {
	return meta.IsStatusConditionTrue(nc.Status.Conditions, t)
}

func (c *Controller) setCondition(nc *karpv1.NodeClaim, t string, s metav1.ConditionStatus, reason, msg string) {
	nodeclaims.SetCondition(nc, c.Clock, t, s, reason, msg)
}

// launch creates the machine.
func (c *Controller) launch(ctx context.Context, nc *karpv1.NodeClaim) (bool, reconcile.Result, error) {
	if isTrue(nc, karpv1.ConditionTypeLaunched) {
		return true, reconcile.Result{}, nil
	}
	if age := c.Clock.Since(nc.CreationTimestamp.Time); age >= LaunchTTL {
		msg := fmt.Sprintf("NodeClaim did not launch within %s", LaunchTTL)
		if cond := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeLaunched); cond != nil && cond.Message != "" {
			msg += ": " + cond.Message
		}
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "LaunchTimeout", "Launch", "%s", msg)
		log.FromContext(ctx).Info("deleting nodeclaim: launch timed out", "ttl", LaunchTTL.String(), "reason", msg)
		c.Metrics.Disrupted(nc, metrics.ReasonLaunchTimeout)
		reason := "LaunchFailed"
		if cond := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeLaunched); cond != nil && cond.Reason != "" {
			reason = cond.Reason
		}
		c.recordOutcome(ctx, nc, false, reason, msg)
		return false, reconcile.Result{}, c.deleteClaim(ctx, nc)
	}
	created, err := c.Cloud.Create(ctx, nc)
	switch {
	case cloudprovider.IsInsufficientCapacity(err):
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "InsufficientCapacityError", "Launch", "NodeClaim %s event: %s", nc.Name, err)
		c.tellNominatedPods(ctx, nc, err)
		log.FromContext(ctx).Info("deleting nodeclaim: insufficient capacity", "error", err.Error())
		c.Metrics.Disrupted(nc, metrics.ReasonInsufficientCapacity)
		return false, reconcile.Result{}, c.deleteClaim(ctx, nc)
	case cloudprovider.IsInvalidNodeClaim(err):
		// No retry can launch it, and none of its values may reach a machine: deleted, as a
		// claim whose class is missing is; its pool (if it holds the same values) is not Ready
		// and plans no other.
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "NodeClaimInvalid", "Launch", "%s", truncate(err.Error()))
		log.FromContext(ctx).Info("deleting nodeclaim: invalid", "error", err.Error())
		c.Metrics.Disrupted(nc, metrics.ReasonInvalidNodeClaim)
		return false, reconcile.Result{}, c.deleteClaim(ctx, nc)
	case cloudprovider.IsNodeClassNotReady(err):
		// Missing or not ready, the claim is deleted, as Karpenter deletes it: the provisioner
		// plans no claim onto a pool whose class is not ready, so its pods wait, told why, and
		// get a claim again once the class is ready.
		var nf *cloudprovider.NodeClassNotReadyError
		if errors.As(err, &nf) && nf.NotFound {
			c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "NodeClaimFailedToResolveNodeClass", "Launch", "Failed to resolve NodeClass: %s", err)
			log.FromContext(ctx).Info("deleting nodeclaim: nodeclass not found", "error", err.Error())
		} else {
			c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "NodeClassNotReady", "Launch", "NodeClass is not ready: %s", truncate(err.Error()))
			log.FromContext(ctx).Info("deleting nodeclaim: nodeclass not ready", "error", err.Error())
		}
		c.Metrics.Disrupted(nc, metrics.ReasonNodeClassNotReady)
		return false, reconcile.Result{}, c.deleteClaim(ctx, nc)
	case err != nil:
		// Retried until LaunchTTL; the condition, event and log say why.
		c.setCondition(nc, karpv1.ConditionTypeLaunched, metav1.ConditionFalse, "LaunchFailed", truncate(err.Error()))
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "LaunchFailed", "Launch", "Launching NodeClaim: %s", truncate(err.Error()))
		log.FromContext(ctx).Info("launching nodeclaim failed", "error", err.Error())
		wait := nc.CreationTimestamp.Add(LaunchTTL).Sub(c.Clock.Now())
		return false, reconcile.Result{RequeueAfter: max(min(wait, launchRetry), time.Second)}, nil
	}
	crashpoint.Hit(crashpoint.LaunchCreated)
	nc.Labels = launchedLabels(nc, created)
	nc.Status.ProviderID = created.Status.ProviderID
	nc.Status.ImageID = created.Status.ImageID
	nc.Status.Capacity = created.Status.Capacity
	nc.Status.Allocatable = created.Status.Allocatable
	c.setCondition(nc, karpv1.ConditionTypeLaunched, metav1.ConditionTrue, "Launched", "")
	c.Metrics.Launched(nc.Labels[karpv1.NodePoolLabelKey])
	c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "Launched", "Launch", "Launched %s in %s (%s)",
		created.Labels[karpv1.InstanceTypeLabelKey], created.Labels[karpv1.ZoneLabelKey], created.Labels[karpv1.CapacityTypeLabelKey])
	log.FromContext(ctx).Info("launched nodeclaim", "provider-id", created.Status.ProviderID,
		"instance-type", created.Labels[karpv1.InstanceTypeLabelKey], "zone", created.Labels[karpv1.ZoneLabelKey],
		"capacity-type", created.Labels[karpv1.CapacityTypeLabelKey], "allocatable", describe(created.Status.Allocatable))
	return true, reconcile.Result{}, nil
}

// Pods' InsufficientCapacityError events are bounded across claims, as Karpenter bounds them
// (5 per second, burst 10): a burst's capacity error may strand thousands of pods at once.
const (
	iceEventsPerSecond = 5
	iceEventBurst      = 10
)

// tellNominatedPods sends an InsufficientCapacityError event to each pod planned onto the claim
// that is still waiting (not bound, not finished, not being deleted), so that its owner learns
// why without reading Capstan's logs; the pods are planned again at the next pass.
func (c *Controller) tellNominatedPods(ctx context.Context, nc *karpv1.NodeClaim, launchErr error) {
	if c.Nominated == nil {
		return
	}
	c.iceEventsOnce.Do(func() {
		c.iceEvents = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(iceEventsPerSecond, iceEventBurst, c.Clock)
	})
	for _, key := range c.Nominated.PodsNominatedTo(nc.Name) {
		pod := &corev1.Pod{}
		if err := c.Client.Get(ctx, key, pod); err != nil {
			continue
		}
		if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		if !c.iceEvents.TryAccept() {
			return
		}
		c.Recorder.Eventf(pod, nc, corev1.EventTypeWarning, "InsufficientCapacityError", "Launch",
			"NodeClaim %s nominated for this pod failed to launch: %s", nc.Name, truncate(launchErr.Error()))
	}
}

func truncate(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

func describe(rl corev1.ResourceList) string {
	keys := slices.Sorted(maps.Keys(rl))
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		q := rl[k]
		parts = append(parts, fmt.Sprintf("%s: %s", k, q.String()))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// deleteClaim deletes the claim; nc is marked deleted so that the caller writes nothing more.
func (c *Controller) deleteClaim(ctx context.Context, nc *karpv1.NodeClaim) error {
	if err := c.Client.Delete(ctx, nc.DeepCopy()); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting nodeclaim: %w", err)
	}
	now := metav1.NewTime(c.Clock.Now())
	nc.DeletionTimestamp = &now
	return nil
}

// launchedLabels are a launched claim's labels: what the cloud resolved, overridden by the claim's
// single-valued requirements, overridden by the labels the claim already has (its NodePool's
// template labels), so that a label the user wrote is never replaced by a provider's.
func launchedLabels(nc, created *karpv1.NodeClaim) map[string]string {
	out := maps.Clone(created.Labels)
	if out == nil {
		out = map[string]string{}
	}
	if reqs, err := nodepools.FromAPI(nc.Spec.Requirements); err == nil {
		maps.Copy(out, reqs.Labels())
	}
	maps.Copy(out, nc.Labels)
	return out
}

// reportUnmanaged says once per claim that its NodeClass kind belongs to no provider Capstan
// runs; the claim is left alone, as another autoscaler may own it.
func (c *Controller) reportUnmanaged(ctx context.Context, nc *karpv1.NodeClaim) {
	if _, seen := c.unmanaged.LoadOrStore(nc.UID, true); seen {
		return
	}
	ref := "none"
	if r := nc.Spec.NodeClassRef; r != nil {
		ref = r.Kind + "." + r.Group + "/" + r.Name
	}
	c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "UnmanagedNodeClass", "Ignore",
		"NodeClaim's nodeClassRef %s is not a kind the %s provider serves; Capstan leaves it alone", ref, c.Cloud.Name())
	log.FromContext(ctx).Info("ignoring nodeclaim of an unmanaged nodeclass kind", "nodeClassRef", ref)
}
