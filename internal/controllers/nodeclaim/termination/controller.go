package termination

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
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
)

// pollInterval is how often a draining or terminating claim is looked at again.
const pollInterval = time.Second

// Workers is how many claims are terminated at once: draining is mostly waiting on evictions,
// so a scale-down of many machines must not queue behind one. Each claim is still reconciled by
// one worker at a time.
const Workers = 64

// Controller terminates deleted NodeClaims.
type Controller struct {
	Client   client.Client
	Cloud    cloudprovider.CloudProvider
	Clock    clock.Clock
	Recorder events.EventRecorder
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// Launches, shared with the lifecycle controller, marks claims whose launch is in flight; may
	// be nil.
	Launches *nodeclaims.Launches

	// Capacity names the NodeClaims provisioning launched for the pods of a node going away, and
	// whether it has planned them yet (the provisioner); the drain waits for both
	// (awaitCapacity). May be nil: no wait.
	Capacity interface {
		LaunchedFor(node string, pods []types.UID) (claims []string, planned bool)
	}
	// pdbEvents bounds the pod events of evictions a PodDisruptionBudget blocks.
	pdbEvents pdbEvents
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "nodeclaim.termination" }

// Register adds the controller to a manager.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(c.Name()).
		For(&karpv1.NodeClaim{}).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(claimstore.ClaimForNode(c.Client))).
		WithOptions(controller.Options{MaxConcurrentReconciles: Workers}).
		Complete(c)
}

// Reconcile drains and terminates a deleted NodeClaim.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	nc := &karpv1.NodeClaim{}
	if err := c.Client.Get(ctx, req.NamespacedName, nc); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !cloudprovider.Manages(c.Cloud, nc.Spec.NodeClassRef) {
		// Another provider's claim: its finalizer and its machine are not Capstan's.
		return reconcile.Result{}, nil
	}
	node, err := c.nodeFor(ctx, nc)
	if err != nil {
		return reconcile.Result{}, err
	}
	if nc.DeletionTimestamp.IsZero() {
		// A Node deleted by hand takes its NodeClaim with it.
		if node != nil && !node.DeletionTimestamp.IsZero() {
			log.FromContext(ctx).Info("deleting nodeclaim: its node was deleted", "Node", node.Name)
			return reconcile.Result{}, client.IgnoreNotFound(c.Client.Delete(ctx, nc))
		}
		return reconcile.Result{}, nil
	}
	if !controllerutil.ContainsFinalizer(nc, karpv1.TerminationFinalizer) {
		return reconcile.Result{}, nil
	}
	if c.Launches.InFlight(nc.Name) {
		// The machine being bought is not recorded on the claim yet: wait for it, then
		// terminate it, rather than let the claim go and leak the machine.
		return reconcile.Result{RequeueAfter: pollInterval}, nil
	}
	stored := nc.DeepCopy()
	result, done, err := c.terminate(ctx, nc, node)
	if !nodeclaims.ConditionsEqual(stored, nc) {
		written, res, perr := claimstore.PatchStatusWritten(ctx, c.Client, nc, stored)
		if perr != nil || res.RequeueAfter > 0 {
			return res, errors.Join(err, perr)
		}
		// The status patch moved the resource version on: the finalizer removal below is
		// locked on the claim as the server wrote it, not on a read of the cache, which may
		// not have seen that write yet (every such removal would conflict and be retried).
		if written != nil {
			nc = written
		}
	}
	if err != nil || !done {
		return result, err
	}
	orig := nc.DeepCopy()
	controllerutil.RemoveFinalizer(nc, karpv1.TerminationFinalizer)
	if err := c.Client.Patch(ctx, nc, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			// Changed since it was read (another writer): read it again shortly, not an error.
			log.FromContext(ctx).V(1).Info("nodeclaim changed since it was read; removing the finalizer again")
			return reconcile.Result{RequeueAfter: claimstore.ConflictRetry}, nil
		}
		return reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("removing finalizer: %w", err))
	}
	log.FromContext(ctx).Info("deleted nodeclaim", "provider-id", nc.Status.ProviderID)
	c.Metrics.Terminated(nc, nc.Status.NodeName != "")
	return reconcile.Result{}, nil
}

func (c *Controller) setCondition(nc *karpv1.NodeClaim, t string, s metav1.ConditionStatus, reason, msg string) {
	nodeclaims.SetCondition(nc, c.Clock, t, s, reason, msg)
}

func (c *Controller) nodeFor(ctx context.Context, nc *karpv1.NodeClaim) (*corev1.Node, error) {
	return claimstore.NodeFor(ctx, c.Client, nc)
}

// deadline is when the claim's pods lose their protection: deletion + terminationGracePeriod.
func deadline(nc *karpv1.NodeClaim) *time.Time {
	if nc.Spec.TerminationGracePeriod == nil || nc.DeletionTimestamp == nil {
		return nil
	}
	d := nc.DeletionTimestamp.Add(nc.Spec.TerminationGracePeriod.Duration)
	return &d
}

// terminate drains, deletes the machine and the Node; done when the finalizer may go: the
// machine and the Node are gone.
func (c *Controller) terminate(ctx context.Context, nc *karpv1.NodeClaim, node *corev1.Node) (reconcile.Result, bool, error) {
	// A machine that is not the claim's (a forged NodeClaim, an edited provider ID) is neither
	// drained nor terminated: the claim stays, with an event saying why, until a person looks.
	// Asked once, before the drain starts (the node is not tainted yet): the requeues of a drain
	// do not call the cloud again, and Delete checks again before terminating.
	if node != nil && !nodeclaims.Disrupted(node) {
		if err := cloudprovider.CheckOwnership(ctx, c.Cloud, nc); cloudprovider.IsNotOwned(err) {
			if c.Recorder != nil {
				c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "InstanceNotOwned", "Terminate", "not draining or terminating the machine: %v", err)
			}
			c.setCondition(nc, karpv1.ConditionTypeInstanceTerminating, metav1.ConditionFalse, "InstanceNotOwned", err.Error())
			return reconcile.Result{}, false, err
		} else if err != nil {
			return reconcile.Result{}, false, fmt.Errorf("checking the machine's ownership: %w", err)
		}
	}
	if node != nil {
		if result, done, err := c.drainNode(ctx, nc, node); err != nil || !done {
			return result, false, err
		}
	}
	// Delete finds the machine by the claim when its provider ID was never recorded (a launch
	// whose result was lost to a restart), so none is left behind.
	err := c.Cloud.Delete(ctx, nc)
	switch {
	case cloudprovider.IsNodeClaimNotFound(err):
		// Gone.
	case err != nil:
		return reconcile.Result{}, false, fmt.Errorf("terminating instance: %w", err)
	default:
		crashpoint.Hit(crashpoint.InstanceDeleted)
		c.setCondition(nc, karpv1.ConditionTypeInstanceTerminating, metav1.ConditionTrue, "InstanceTerminating", "")
		if nc.Status.ProviderID == "" {
			// Terminated by claim; it cannot be looked up by provider ID, so ask again.
			return reconcile.Result{RequeueAfter: pollInterval}, false, nil
		}
		switch _, err := c.Cloud.Get(ctx, nc.Status.ProviderID); {
		case cloudprovider.IsNodeClaimNotFound(err):
		case err != nil:
			// Retried with back-off (controller-runtime ignores RequeueAfter beside an error).
			return reconcile.Result{}, false, fmt.Errorf("looking up the terminating instance: %w", err)
		default:
			return reconcile.Result{RequeueAfter: pollInterval}, false, nil
		}
	}
	if node != nil {
		orig := node.DeepCopy()
		controllerutil.RemoveFinalizer(node, karpv1.TerminationFinalizer)
		// Locked on the version read: a merge patch writes the whole list, and a finalizer another
		// writer added since must not be dropped. On a conflict the node is read again shortly.
		if err := c.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: claimstore.ConflictRetry}, false, nil
		} else if client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, false, fmt.Errorf("removing node finalizer: %w", err)
		}
		if err := c.Client.Delete(ctx, node); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, false, fmt.Errorf("deleting node: %w", err)
		}
		// Another writer's finalizer holds the Node: the claim stays until the Node is gone, so
		// that a NodeClaim stands for every Node of the pool (its limits, a static pool's count).
		if len(node.Finalizers) > 0 {
			log.FromContext(ctx).V(1).Info("waiting for the node's other finalizers", "Node", node.Name, "finalizers", node.Finalizers)
			return reconcile.Result{RequeueAfter: pollInterval}, false, nil
		}
	}
	return reconcile.Result{}, true, nil
}

func (c *Controller) taint(ctx context.Context, node *corev1.Node) error {
	if nodeclaims.Disrupted(node) {
		return nil
	}
	orig := node.DeepCopy()
	node.Spec.Taints = append(node.Spec.Taints, karpv1.DisruptedNoScheduleTaint)
	if err := c.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("tainting node %s: %w", node.Name, err)
	}
	log.FromContext(ctx).Info("tainted node", "Node", node.Name, "taint", karpv1.DisruptedTaintKey)
	return nil
}

// drainNode taints and drains the claim's node; done when nothing is left to wait for: no pod to
// drain, or a machine that no longer exists (draining would wait for pods that cannot leave).
func (c *Controller) drainNode(ctx context.Context, nc *karpv1.NodeClaim, node *corev1.Node) (reconcile.Result, bool, error) {
	if err := c.taint(ctx, node); apierrors.IsConflict(err) {
		// The node changed since it was read (its status, another writer's labels): read it
		// again shortly, not an error.
		return reconcile.Result{RequeueAfter: claimstore.ConflictRetry}, false, nil
	} else if err != nil {
		return reconcile.Result{}, false, err
	}
	remaining, awaiting, err := c.drain(ctx, nc, node)
	if err != nil {
		return reconcile.Result{}, false, err
	}
	if awaiting != "" {
		c.setCondition(nc, karpv1.ConditionTypeDrained, metav1.ConditionFalse, "AwaitingCapacity",
			fmt.Sprintf("%d pod(s) left to drain once %s; waiting %s after deletion at most", remaining, awaiting, capacityWait(nc).Round(time.Second)))
		log.FromContext(ctx).V(1).Info("waiting before the drain", "Node", node.Name, "until", awaiting)
		return reconcile.Result{RequeueAfter: pollInterval}, false, nil
	}
	switch {
	case remaining == 0:
		c.setCondition(nc, karpv1.ConditionTypeDrained, metav1.ConditionTrue, "Drained", "")
		return c.awaitVolumes(ctx, nc, node)
	case c.machineGone(ctx, nc):
		log.FromContext(ctx).Info("skipping drain: the machine no longer exists", "Node", node.Name)
		c.setCondition(nc, karpv1.ConditionTypeDrained, metav1.ConditionTrue, "InstanceTerminated", "the machine no longer exists")
		return reconcile.Result{}, true, nil
	}
	c.setCondition(nc, karpv1.ConditionTypeDrained, metav1.ConditionFalse, "Draining", fmt.Sprintf("%d pod(s) left to drain", remaining))
	return reconcile.Result{RequeueAfter: pollInterval}, false, nil
}

// machineGone reports whether the cloud says the claim's machine no longer exists.
func (c *Controller) machineGone(ctx context.Context, nc *karpv1.NodeClaim) bool {
	if nc.Status.ProviderID == "" {
		return false
	}
	_, err := c.Cloud.Get(ctx, nc.Status.ProviderID)
	return cloudprovider.IsNodeClaimNotFound(err)
}
