package cloudprovider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Deadlines bound each call to a cloud provider: a call that hangs (an endpoint that never
// answers, an SDK retrying for minutes) would hold a controller's worker and, for a launch, the
// claim's launch lock — and so its termination — for as long as it lasts.
type Deadlines struct {
	// Create bounds a launch (default DefaultCreateDeadline): CreateFleet and the describes
	// around it, retries included.
	Create time.Duration
	// Delete, Get and List bound a termination, a lookup and the listing of every machine
	// (default DefaultCallDeadline).
	Delete, Get, List time.Duration
	// InstanceTypes bounds GetInstanceTypes (default DefaultInstanceTypesDeadline): a refresh
	// pages through every type, price and spot price of a region.
	InstanceTypes time.Duration
	// IsDrifted bounds a drift check (default DefaultCallDeadline).
	IsDrifted time.Duration
}

// Default deadlines.
const (
	DefaultCreateDeadline        = 2 * time.Minute
	DefaultCallDeadline          = time.Minute
	DefaultInstanceTypesDeadline = 3 * time.Minute
)

// TimeoutError is a cloud-provider call that did not answer within its deadline. A timed-out
// Create may still have launched: Create is idempotent per NodeClaim, so the retry finds it.
type TimeoutError struct {
	// Call is the provider method ("Create"); After is its deadline.
	Call  string
	After time.Duration
	Err   error
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("the cloud provider's %s did not answer within %s: %v", e.Call, e.After, e.Err)
}

func (e *TimeoutError) Unwrap() error { return e.Err }

// WithDeadlines wraps a provider so that each call runs under its deadline, and a call cut short
// by it returns a *TimeoutError.
func WithDeadlines(cp CloudProvider, d Deadlines) CloudProvider {
	or := func(v, def time.Duration) time.Duration {
		if v > 0 {
			return v
		}
		return def
	}
	d.Create = or(d.Create, DefaultCreateDeadline)
	d.Delete, d.Get, d.List = or(d.Delete, DefaultCallDeadline), or(d.Get, DefaultCallDeadline), or(d.List, DefaultCallDeadline)
	d.InstanceTypes = or(d.InstanceTypes, DefaultInstanceTypesDeadline)
	d.IsDrifted = or(d.IsDrifted, DefaultCallDeadline)
	return &deadlined{cp: cp, d: d}
}

type deadlined struct {
	cp CloudProvider
	d  Deadlines
}

// call runs f under the deadline and names a timeout.
func call[T any](ctx context.Context, name string, after time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, after, errDeadline)
	defer cancel()
	v, err := f(ctx)
	if err != nil && errors.Is(context.Cause(ctx), errDeadline) {
		// Errors of the provider's own kinds (not found, no capacity) stay what they are.
		var nf *NodeClaimNotFoundError
		var ice *InsufficientCapacityError
		var no *NotOwnedError
		if !errors.As(err, &nf) && !errors.As(err, &ice) && !errors.As(err, &no) {
			return v, &TimeoutError{Call: name, After: after, Err: err}
		}
	}
	return v, err
}

var errDeadline = errors.New("cloud provider call deadline")

func (p *deadlined) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	return call(ctx, "Create", p.d.Create, func(ctx context.Context) (*karpv1.NodeClaim, error) { return p.cp.Create(ctx, nc) })
}

func (p *deadlined) Delete(ctx context.Context, nc *karpv1.NodeClaim) error {
	_, err := call(ctx, "Delete", p.d.Delete, func(ctx context.Context) (struct{}, error) { return struct{}{}, p.cp.Delete(ctx, nc) })
	return err
}

func (p *deadlined) Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error) {
	return call(ctx, "Get", p.d.Get, func(ctx context.Context) (*karpv1.NodeClaim, error) { return p.cp.Get(ctx, providerID) })
}

func (p *deadlined) List(ctx context.Context) ([]*karpv1.NodeClaim, error) {
	return call(ctx, "List", p.d.List, p.cp.List)
}

func (p *deadlined) GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*InstanceType, error) {
	return call(ctx, "GetInstanceTypes", p.d.InstanceTypes, func(ctx context.Context) ([]*InstanceType, error) {
		return p.cp.GetInstanceTypes(ctx, np)
	})
}

func (p *deadlined) IsDrifted(ctx context.Context, nc *karpv1.NodeClaim) (DriftReason, error) {
	return call(ctx, "IsDrifted", p.d.IsDrifted, func(ctx context.Context) (DriftReason, error) { return p.cp.IsDrifted(ctx, nc) })
}

func (p *deadlined) Name() string                    { return p.cp.Name() }
func (p *deadlined) WellKnownLabels() []string       { return p.cp.WellKnownLabels() }
func (p *deadlined) NodeClasses() []schema.GroupKind { return p.cp.NodeClasses() }

// Unwrap is the provider under the deadlines.
func (p *deadlined) Unwrap() CloudProvider { return p.cp }
