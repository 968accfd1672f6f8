package testenv

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StoredBefore is a client whose Get and Patch show each object as Edit leaves it: a test's way
// to hand a controller an object the API server would no longer store, such as one stored before
// its CRD refused a value. Writes go to the API server unchanged; a merge patch computed from
// two edited copies carries none of the edit.
type StoredBefore struct {
	client.Client
	// Edit changes an object read; it must leave alone objects it is not about.
	Edit func(client.Object)
}

// Get reads the object and edits it.
func (c *StoredBefore) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := c.Client.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	c.Edit(obj)
	return nil
}

// Patch patches the object and edits the server's answer, as Get does.
func (c *StoredBefore) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if err := c.Client.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	c.Edit(obj)
	return nil
}
