// Package claimstore reads and writes NodeClaims through the API server: creates under names of
// Capstan's own (so that a create whose answer was lost can be looked up), status patches checked
// against the version read, a claim's Node and a Node's claim through the provider-ID indexes.
// What a claim says, read without a client, is internal/nodeclaims'.
package claimstore

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// NodeFor returns the Node of the claim, or nil when none has registered: by the name the claim
// recorded when there is one (one read), else by provider ID (an indexed list).
func NodeFor(ctx context.Context, c client.Reader, nc *karpv1.NodeClaim) (*corev1.Node, error) {
	providerID := nc.Status.ProviderID
	if providerID == "" {
		return nil, nil
	}
	if nc.Status.NodeName != "" {
		node := &corev1.Node{}
		err := c.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, node)
		switch {
		case err == nil && node.Spec.ProviderID == providerID:
			return node, nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("getting node %s: %w", nc.Status.NodeName, err)
		}
	}
	nodes := &corev1.NodeList{}
	if err := listByProviderID(ctx, c, nodes, providerID); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for i := range nodes.Items {
		if nodes.Items[i].Spec.ProviderID == providerID {
			return &nodes.Items[i], nil
		}
	}
	return nil, nil
}

// ClaimForNode maps a Node to the request of its NodeClaim: through its owner reference once the
// claim adopted it, else through its provider ID. It is a handler.MapFunc for Node watches.
func ClaimForNode(c client.Reader) func(context.Context, client.Object) []reconcile.Request {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		node, ok := o.(*corev1.Node)
		if !ok {
			return nil
		}
		for _, ref := range node.OwnerReferences {
			if ref.Kind == "NodeClaim" && ref.APIVersion == karpv1.SchemeGroupVersion.String() {
				return []reconcile.Request{{NamespacedName: client.ObjectKey{Name: ref.Name}}}
			}
		}
		if node.Spec.ProviderID == "" {
			return nil
		}
		nc, err := ByProviderID(ctx, c, node.Spec.ProviderID)
		if err != nil {
			log.FromContext(ctx).Error(err, "finding the nodeclaim of a node", "Node", node.Name)
			return nil
		}
		if nc != nil {
			return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(nc)}}
		}
		return nil
	}
}

// ConflictRetry is how soon a controller whose write of a claim lost a race reads the claim again.
const ConflictRetry = 100 * time.Millisecond

// PatchStatus writes nc's status as a change from stored, checked against stored's
// resourceVersion, so that a condition another controller wrote since stored was read (or that a
// lagging cache has not shown yet) is never erased. When the claim moved on, nothing is written
// and the result asks to read it again soon. A claim that is gone is not an error.
func PatchStatus(ctx context.Context, c client.Client, nc, stored *karpv1.NodeClaim) (reconcile.Result, error) {
	_, res, err := PatchStatusWritten(ctx, c, nc, stored)
	return res, err
}

// PatchStatusWritten is PatchStatus that also returns the claim as the server wrote it, or nil
// when nothing was written.
func PatchStatusWritten(ctx context.Context, c client.Client, nc, stored *karpv1.NodeClaim) (*karpv1.NodeClaim, reconcile.Result, error) {
	written := nc.DeepCopy()
	err := c.Status().Patch(ctx, written, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{}))
	switch {
	case apierrors.IsConflict(err):
		log.FromContext(ctx).V(1).Info("nodeclaim changed since it was read; reading it again")
		return nil, reconcile.Result{RequeueAfter: ConflictRetry}, nil
	case err != nil:
		return nil, reconcile.Result{}, client.IgnoreNotFound(fmt.Errorf("patching nodeclaim status: %w", err))
	}
	return written, reconcile.Result{}, nil
}
