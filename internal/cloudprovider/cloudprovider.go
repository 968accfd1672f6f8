package cloudprovider

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// CloudProvider is what Capstan needs from a cloud. Implementations: the simulated cloud
// (internal/cloudprovider/sim) and AWS.
//
// Error contract: Create returns an *InsufficientCapacityError when no offering the NodeClaim
// allows can be launched now (the caller deletes the claim and marks the offerings unavailable
// for a while), a *NodeClassNotReadyError when the claim's NodeClass is missing or not ready,
// and an *InvalidNodeClaimError when the claim holds a value no machine can join the cluster
// with (retrying cannot help; ValidateNodeClaim says which).
// Get and Delete return a *NodeClaimNotFoundError when the machine no longer exists (Get also
// for a provider ID that is not this cloud's: it names no machine here); Delete of a machine
// already terminating returns nil. Any other error is transient: retry with backoff.
type CloudProvider interface {
	// Create launches the machine a NodeClaim asks for and returns the claim with its status
	// (providerID, capacity, allocatable, imageID) and labels (instance type, zone, capacity type)
	// filled in. It is idempotent per NodeClaim: a retry, or a call after a restart, returns the
	// machine already launched for it instead of launching another.
	Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error)
	// Delete terminates the NodeClaim's machine: the one with its provider ID, or, when the claim
	// has none (a launch whose result was never recorded), the one launched for the claim.
	Delete(ctx context.Context, nc *karpv1.NodeClaim) error
	// Get returns the machine with this provider ID, as a NodeClaim.
	Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error)
	// List returns every machine the cloud runs for this cluster, as NodeClaims.
	List(ctx context.Context) ([]*karpv1.NodeClaim, error)
	// GetInstanceTypes returns the instance types the NodePool's NodeClass offers, with current
	// offerings and availability.
	GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*InstanceType, error)
	// IsDrifted says why a machine no longer matches its NodeClass, or "" when it does.
	IsDrifted(ctx context.Context, nc *karpv1.NodeClaim) (DriftReason, error)
	// Name is the provider's name ("sim", "aws"), the scheme of its provider IDs.
	Name() string
	// WellKnownLabels are the label keys the provider resolves on its machines beyond Kubernetes'
	// and Karpenter's own (instance-type details such as karpenter.k8s.aws/instance-family). Pods
	// and NodePools may require them without a NodePool setting them; an instance type that
	// lacks one does not carry that label.
	WellKnownLabels() []string
	// NodeClasses are the NodeClass kinds the provider serves. Capstan's controllers act only on
	// NodePools and NodeClaims whose nodeClassRef names one of them: the others may belong to
	// another provider or another autoscaler in the same cluster.
	NodeClasses() []schema.GroupKind
}

// Manages reports whether the provider serves the NodeClass kind ref names. A nil ref (a NodeClaim
// written without one) is not managed.
func Manages(cp CloudProvider, ref *karpv1.NodeClassReference) bool {
	if ref == nil {
		return false
	}
	for _, gk := range cp.NodeClasses() {
		if gk.Group == ref.Group && gk.Kind == ref.Kind {
			return true
		}
	}
	return false
}

// DriftReason says why a machine drifted from its NodeClass.
type DriftReason string

// NodeClaimNotFoundError means the machine does not exist (any more).
type NodeClaimNotFoundError struct{ Err error }

func (e *NodeClaimNotFoundError) Error() string { return fmt.Sprintf("nodeclaim not found: %v", e.Err) }
func (e *NodeClaimNotFoundError) Unwrap() error { return e.Err }

// NotOwnedError means the NodeClaim's machine is not one this cluster launched for it (another
// cluster's, another NodePool's or another NodeClaim's, by the machine's own tags): a forged
// NodeClaim or an edited provider ID. Capstan neither drains nor terminates such a machine.
type NotOwnedError struct{ Err error }

func (e *NotOwnedError) Error() string {
	return fmt.Sprintf("machine not owned by the NodeClaim: %v", e.Err)
}
func (e *NotOwnedError) Unwrap() error { return e.Err }

// IsNotOwned reports whether err is or wraps a NotOwnedError.
func IsNotOwned(err error) bool {
	var e *NotOwnedError
	return errors.As(err, &e)
}

// OwnershipChecker is a provider that can say whether a NodeClaim's machine is its own before
// anything is done to it (drained, terminated).
type OwnershipChecker interface {
	// CheckOwnership returns a *NotOwnedError when the claim's machine carries another
	// cluster's, NodePool's or NodeClaim's tags; nil when it is the claim's, or there is none.
	CheckOwnership(ctx context.Context, nc *karpv1.NodeClaim) error
}

// CheckOwnership asks the provider (under its deadlines) whether the claim's machine is the
// claim's own; providers that cannot tell answer nil.
func CheckOwnership(ctx context.Context, cp CloudProvider, nc *karpv1.NodeClaim) error {
	if d, ok := cp.(*deadlined); ok {
		_, err := call(ctx, "CheckOwnership", d.d.Delete, func(ctx context.Context) (struct{}, error) {
			return struct{}{}, CheckOwnership(ctx, d.cp, nc)
		})
		return err
	}
	if oc, ok := cp.(OwnershipChecker); ok {
		return oc.CheckOwnership(ctx, nc)
	}
	return nil
}

// InsufficientCapacityError means none of the offerings a NodeClaim allows could be launched.
type InsufficientCapacityError struct {
	// Offerings are the instance type/zone/capacity type triples that failed.
	Offerings []OfferingKey
	Err       error
}

// OfferingKey names one offering; ReservationID is set for a reserved one (one reservation
// running out leaves another of the same type and zone offered).
type OfferingKey struct{ InstanceType, Zone, CapacityType, ReservationID string }

func (e *InsufficientCapacityError) Error() string {
	return fmt.Sprintf("insufficient capacity: %v", e.Err)
}
func (e *InsufficientCapacityError) Unwrap() error { return e.Err }

// NodeClassNotReadyError means the NodeClaim's NodeClass is missing or not ready.
type NodeClassNotReadyError struct {
	// NotFound is set when the NodeClass does not exist (or is of a kind the provider does not
	// serve), as opposed to existing but not ready yet.
	NotFound bool
	Err      error
}

func (e *NodeClassNotReadyError) Error() string { return fmt.Sprintf("nodeclass not ready: %v", e.Err) }
func (e *NodeClassNotReadyError) Unwrap() error { return e.Err }

// InvalidNodeClaimError means the NodeClaim holds a taint or label that no node could register
// with (one stored before its CRD refused such values): no machine is launched for it, and none
// of its values reaches a machine's boot script.
type InvalidNodeClaimError struct{ Err error }

func (e *InvalidNodeClaimError) Error() string { return fmt.Sprintf("invalid nodeclaim: %v", e.Err) }
func (e *InvalidNodeClaimError) Unwrap() error { return e.Err }

// IsInvalidNodeClaim reports whether err is or wraps an InvalidNodeClaimError.
func IsInvalidNodeClaim(err error) bool {
	var e *InvalidNodeClaimError
	return errors.As(err, &e)
}

// ValidateNodeClaim returns an *InvalidNodeClaimError naming each of the claim's taints, startup
// taints and labels the kubelet could not register its node with, or nil. Providers call it
// before launching: the API server refuses such values since the CRDs check them, but a claim
// stored before may still hold one.
func ValidateNodeClaim(nc *karpv1.NodeClaim) error {
	spec := field.NewPath("spec")
	errs := karpv1.ValidateTaints(nc.Spec.Taints, spec.Child("taints"))
	errs = append(errs, karpv1.ValidateTaints(nc.Spec.StartupTaints, spec.Child("startupTaints"))...)
	errs = append(errs, karpv1.ValidateNodeLabels(nc.Labels, field.NewPath("metadata", "labels"))...)
	if len(errs) == 0 {
		return nil
	}
	return &InvalidNodeClaimError{Err: fmt.Errorf("NodeClaim %s: %w", nc.Name, errs.ToAggregate())}
}

// IsNodeClaimNotFound reports whether err is or wraps a NodeClaimNotFoundError.
func IsNodeClaimNotFound(err error) bool {
	var e *NodeClaimNotFoundError
	return errors.As(err, &e)
}

// IgnoreNodeClaimNotFound returns nil for a NodeClaimNotFoundError and err otherwise.
func IgnoreNodeClaimNotFound(err error) error {
	if IsNodeClaimNotFound(err) {
		return nil
	}
	return err
}

// IsInsufficientCapacity reports whether err is or wraps an InsufficientCapacityError.
func IsInsufficientCapacity(err error) bool {
	var e *InsufficientCapacityError
	return errors.As(err, &e)
}

// IsNodeClassNotReady reports whether err is or wraps a NodeClassNotReadyError.
func IsNodeClassNotReady(err error) bool {
	var e *NodeClassNotReadyError
	return errors.As(err, &e)
}
