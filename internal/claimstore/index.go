package claimstore

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// ProviderIDField names the cache index of NodeClaims by status.providerID and of Nodes by
// spec.providerID. Without it, matching a Node to its claim copies every claim (or every Node)
// out of the cache: at a few hundred machines that was half of Capstan's CPU during a burst.
const ProviderIDField = "providerID"

// IndexProviderIDs registers the ProviderIDField indexes on a manager's cache.
func IndexProviderIDs(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &karpv1.NodeClaim{}, ProviderIDField, func(o client.Object) []string {
		if id := o.(*karpv1.NodeClaim).Status.ProviderID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing nodeclaims by provider ID: %w", err)
	}
	if err := indexer.IndexField(ctx, &corev1.Node{}, ProviderIDField, func(o client.Object) []string {
		if id := o.(*corev1.Node).Spec.ProviderID; id != "" {
			return []string{id}
		}
		return nil
	}); err != nil {
		return fmt.Errorf("indexing nodes by provider ID: %w", err)
	}
	return nil
}

// listByProviderID lists into list the objects whose provider ID is id: through the
// ProviderIDField index of a cache, or, when c reads straight from the API server (which has
// no such field selector and answers 400, as in the controllers' tests), all of them: callers
// check the provider ID of what they get. A cache without the index is an error, not a silent
// slow path.
func listByProviderID(ctx context.Context, c client.Reader, list client.ObjectList, id string) error {
	err := c.List(ctx, list, client.MatchingFields{ProviderIDField: id})
	if apierrors.IsBadRequest(err) {
		return c.List(ctx, list)
	}
	return err
}

// ByProviderID returns the NodeClaim whose status.providerID is id, or nil when none has it.
func ByProviderID(ctx context.Context, c client.Reader, id string) (*karpv1.NodeClaim, error) {
	ncs := &karpv1.NodeClaimList{}
	if err := listByProviderID(ctx, c, ncs, id); err != nil {
		return nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	for i := range ncs.Items {
		if ncs.Items[i].Status.ProviderID == id {
			return &ncs.Items[i], nil
		}
	}
	return nil, nil
}
