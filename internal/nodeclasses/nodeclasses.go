// Package nodeclasses reads the NodeClass objects that NodePools and NodeClaims name
// (nodeClassRef), whatever their kind, through the scheme and an API client.
package nodeclasses

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Object is an empty typed object of the NodeClass kind gk at the group's preferred
// version in the scheme, for watches and reads.
func Object(s *runtime.Scheme, gk schema.GroupKind) (client.Object, error) {
	versions := s.PrioritizedVersionsForGroup(gk.Group)
	if len(versions) == 0 {
		return nil, fmt.Errorf("NodeClass group %s is not in the scheme", gk.Group)
	}
	obj, err := s.New(gk.WithVersion(versions[0].Version))
	if err != nil {
		return nil, fmt.Errorf("NodeClass kind %s: %w", gk, err)
	}
	o, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("NodeClass kind %s is not an object", gk)
	}
	return o, nil
}

// Get reads the NodeClass the pool's template names; nil without an error when it
// does not exist.
func Get(ctx context.Context, c client.Client, np *karpv1.NodePool) (client.Object, error) {
	ref := np.Spec.Template.Spec.NodeClassRef
	if ref == nil {
		return nil, nil
	}
	obj, err := Object(c.Scheme(), schema.GroupKind{Group: ref.Group, Kind: ref.Kind})
	if err != nil {
		return nil, err
	}
	if err := c.Get(ctx, client.ObjectKey{Name: ref.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading NodeClass %s/%s: %w", ref.Kind, ref.Name, err)
	}
	return obj, nil
}
