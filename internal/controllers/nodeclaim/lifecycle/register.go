package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
)

// nodeFor returns the claim's Node, or nil.
func (c *Controller) nodeFor(ctx context.Context, nc *karpv1.NodeClaim) (*corev1.Node, error) {
	return claimstore.NodeFor(ctx, c.Client, nc)
}

// register adopts the claim's Node: labels, annotations, taints, owner reference and finalizer,
// then lifts the unregistered taint. A registered claim's Node is adopted again when it is not
// (any more): a kubelet whose Node object was deleted registers it again, with the unregistered
// taint, and nothing else would ever lift it.
func (c *Controller) register(ctx context.Context, nc *karpv1.NodeClaim) (bool, reconcile.Result, error) {
	registered := isTrue(nc, karpv1.ConditionTypeRegistered)
	node, err := c.nodeFor(ctx, nc)
	if err != nil {
		return false, reconcile.Result{}, err
	}
	if registered && (node == nil || adopted(node, nc) || !node.DeletionTimestamp.IsZero()) {
		// A registered claim's node that is gone is garbage collection's and node repair's.
		return true, reconcile.Result{}, nil
	}
	if node == nil {
		launched := nc.CreationTimestamp.Time
		for _, cond := range nc.Status.Conditions {
			if cond.Type == karpv1.ConditionTypeLaunched {
				launched = cond.LastTransitionTime.Time
			}
		}
		if wait := launched.Add(RegistrationTTL).Sub(c.Clock.Now()); wait > 0 {
			c.setCondition(nc, karpv1.ConditionTypeRegistered, metav1.ConditionUnknown, "AwaitingRegistration", "waiting for the node to register")
			return false, reconcile.Result{RequeueAfter: min(wait, 30e9)}, nil
		}
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "RegistrationTimeout", "Register", "Node did not register within %s", RegistrationTTL)
		log.FromContext(ctx).Info("deleting nodeclaim: registration timed out", "ttl", RegistrationTTL.String())
		c.Metrics.Disrupted(nc, metrics.ReasonRegistrationTimeout)
		c.recordOutcome(ctx, nc, false, ReasonRegistrationFailed, fmt.Sprintf("NodeClaim %s's node did not register within %s", nc.Name, RegistrationTTL))
		return false, reconcile.Result{}, c.deleteClaim(ctx, nc)
	}
	if adopted(node, nc) {
		// Adopted already: this reconcile read the claim before its own status update landed.
		nc.Status.NodeName = node.Name
		c.setCondition(nc, karpv1.ConditionTypeRegistered, metav1.ConditionTrue, "Registered", "")
		return true, reconcile.Result{}, nil
	}
	orig := node.DeepCopy()
	if node.Labels == nil {
		node.Labels = map[string]string{}
	}
	maps.Copy(node.Labels, nc.Labels)
	node.Labels[karpv1.NodeRegisteredLabelKey] = "true"
	if registered && isTrue(nc, karpv1.ConditionTypeInitialized) {
		node.Labels[karpv1.NodeInitializedLabelKey] = "true"
	}
	if len(nc.Annotations) > 0 {
		if node.Annotations == nil {
			node.Annotations = map[string]string{}
		}
		maps.Copy(node.Annotations, nc.Annotations)
	}
	if node.Labels[karpv1.NodeDoNotSyncTaintsLabelKey] != "true" {
		taints := slices.Clone(nc.Spec.Taints)
		if !isTrue(nc, karpv1.ConditionTypeInitialized) {
			// Startup taints are put on once: a node adopted again after its claim was
			// initialized has had them lifted by whatever owns them.
			taints = append(taints, nc.Spec.StartupTaints...)
		}
		for _, t := range taints {
			if !slices.ContainsFunc(node.Spec.Taints, func(x corev1.Taint) bool { return x.MatchTaint(&t) }) {
				node.Spec.Taints = append(node.Spec.Taints, t)
			}
		}
	}
	node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == karpv1.UnregisteredTaintKey })
	controllerutil.AddFinalizer(node, karpv1.TerminationFinalizer)
	if !slices.ContainsFunc(node.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == nc.UID }) {
		node.OwnerReferences = append(node.OwnerReferences, metav1.OwnerReference{
			APIVersion: karpv1.SchemeGroupVersion.String(), Kind: "NodeClaim", Name: nc.Name, UID: nc.UID, BlockOwnerDeletion: ptrTo(true),
		})
	}
	if err := c.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsConflict(err) {
			// The kubelet (kwok here) updated the node meanwhile; read it again shortly.
			return false, reconcile.Result{RequeueAfter: 100 * time.Millisecond}, nil
		}
		return false, reconcile.Result{}, fmt.Errorf("syncing node %s: %w", node.Name, err)
	}
	if registered {
		c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "Registered", "Register", "Node %s registered again; adopted it again", node.Name)
		log.FromContext(ctx).Info("adopted the node of a registered nodeclaim again", "provider-id", nc.Status.ProviderID, "Node", node.Name)
		nc.Status.NodeName = node.Name
		return true, reconcile.Result{}, nil
	}
	nc.Status.NodeName = node.Name
	c.setCondition(nc, karpv1.ConditionTypeRegistered, metav1.ConditionTrue, "Registered", "")
	c.Metrics.Registered(nc)
	c.recordOutcome(ctx, nc, true, "", "")
	c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "Registered", "Register", "Node %s registered", node.Name)
	log.FromContext(ctx).Info("registered nodeclaim", "provider-id", nc.Status.ProviderID, "Node", node.Name)
	return true, reconcile.Result{}, nil
}

func ptrTo[T any](v T) *T { return &v }

// adopted reports whether the claim already took the node over: registered label, owner
// reference, finalizer, and no unregistered taint.
func adopted(node *corev1.Node, nc *karpv1.NodeClaim) bool {
	return node.Labels[karpv1.NodeRegisteredLabelKey] == "true" &&
		controllerutil.ContainsFinalizer(node, karpv1.TerminationFinalizer) &&
		slices.ContainsFunc(node.OwnerReferences, func(o metav1.OwnerReference) bool { return o.UID == nc.UID }) &&
		!slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.Key == karpv1.UnregisteredTaintKey })
}

// initialize waits for the Node to be Ready with its startup taints gone and the requested
// extended resources present.
func (c *Controller) initialize(ctx context.Context, nc *karpv1.NodeClaim) (bool, reconcile.Result, error) {
	if isTrue(nc, karpv1.ConditionTypeInitialized) {
		return true, reconcile.Result{}, nil
	}
	node, err := c.nodeFor(ctx, nc)
	if err != nil || node == nil {
		return false, reconcile.Result{}, err
	}
	if node.Labels[karpv1.NodeInitializedLabelKey] == "true" {
		// Initialized already; this reconcile read the claim before its own status update landed.
		c.setCondition(nc, karpv1.ConditionTypeInitialized, metav1.ConditionTrue, "Initialized", "")
		return true, reconcile.Result{}, nil
	}
	if !nodeclaims.NodeReady(node) {
		c.setCondition(nc, karpv1.ConditionTypeInitialized, metav1.ConditionUnknown, "NodeNotReady", "waiting for the node to be ready")
		return false, reconcile.Result{}, nil
	}
	for _, st := range nc.Spec.StartupTaints {
		if slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&st) }) {
			c.setCondition(nc, karpv1.ConditionTypeInitialized, metav1.ConditionUnknown, "StartupTaintsExist", "startup taint "+st.Key+" still on the node")
			return false, reconcile.Result{}, nil
		}
	}
	for name, q := range nc.Spec.Resources.Requests {
		if q.IsZero() {
			continue
		}
		if a, ok := node.Status.Allocatable[name]; !ok || a.IsZero() {
			c.setCondition(nc, karpv1.ConditionTypeInitialized, metav1.ConditionUnknown, "ResourceNotRegistered", "resource "+string(name)+" not yet on the node")
			return false, reconcile.Result{}, nil
		}
	}
	orig := node.DeepCopy()
	node.Labels[karpv1.NodeInitializedLabelKey] = "true"
	if err := c.Client.Patch(ctx, node, client.MergeFrom(orig)); err != nil {
		return false, reconcile.Result{}, fmt.Errorf("labelling node %s initialized: %w", node.Name, err)
	}
	c.setCondition(nc, karpv1.ConditionTypeInitialized, metav1.ConditionTrue, "Initialized", "")
	c.Metrics.Initialized(nc.Labels[karpv1.NodePoolLabelKey])
	c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "Initialized", "Initialize", "Node %s initialized", node.Name)
	log.FromContext(ctx).Info("initialized nodeclaim", "provider-id", nc.Status.ProviderID, "Node", node.Name,
		"allocatable", describe(node.Status.Allocatable))
	return true, reconcile.Result{}, nil
}
