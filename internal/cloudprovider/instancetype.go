package cloudprovider

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// Offering is one way to buy an instance type: a zone and capacity type at a price.
type Offering struct {
	// Zone is the topology zone.
	Zone string
	// CapacityType is on-demand, spot or reserved.
	CapacityType string
	// Price is in US dollars per hour.
	Price float64
	// Available is false when the cloud lacks capacity for the offering right now.
	Available bool
	// ReservationID is set on offerings of capacity type reserved: the capacity reservation a
	// machine bought this way launches into. A reserved offering is launched only by a NodeClaim
	// whose requirements name its reservation (ReservationIDLabelKey).
	ReservationID string
	// ReservationType is the reservation's kind (default, capacity-block).
	ReservationType string
	// ReservationCapacity is how many more machines the reservation holds for this cluster's
	// NodeClaims: the provider's count, less the NodeClaims already pinned to it once the
	// planner has subtracted them (LessPinned).
	ReservationCapacity int
}

// The capacity reservation labels, Karpenter's AWS labels (karpenter.k8s.aws/…), used by the
// simulated cloud too (its catalog is EC2's). They are stated here rather than taken from
// api/aws/v1 so that the provider-neutral core does not depend on one provider's API; the AWS
// provider's tests hold them equal to that API's constants.
const (
	// ReservationIDLabelKey is the label (and NodeClaim requirement) naming the capacity
	// reservation a machine launches into.
	ReservationIDLabelKey = "karpenter.k8s.aws/capacity-reservation-id"
	// ReservationTypeLabelKey is the reservation's kind: ReservationTypeDefault or
	// ReservationTypeCapacityBlock.
	ReservationTypeLabelKey = "karpenter.k8s.aws/capacity-reservation-type"
	// ReservationInterruptibleLabelKey marks a machine in a reservation its owner may reclaim.
	ReservationInterruptibleLabelKey = "karpenter.k8s.aws/capacity-reservation-interruptible"
	// ReservationTypeDefault is an open-ended reservation's kind.
	ReservationTypeDefault = "default"
	// ReservationTypeCapacityBlock is a capacity block's kind: it ends at a set time.
	ReservationTypeCapacityBlock = "capacity-block"
)

// ReservedPrice is what a reserved offering costs per hour when plans are compared: the machine
// is paid for whether it runs or not, so using it costs almost nothing — but the reservations
// still rank among themselves by their on-demand price.
func ReservedPrice(onDemand float64) float64 { return onDemand / reservedDiscount }

// ReservedOnDemand is the on-demand price a reserved offering's reservation bills, from the price
// ReservedPrice gave it.
func ReservedOnDemand(reserved float64) float64 { return reserved * reservedDiscount }

// reservedDiscount is the factor ReservedPrice divides a reservation's on-demand price by.
const reservedDiscount = 1e7

// InstanceType is a machine shape a NodeClass offers.
type InstanceType struct {
	// Name is the instance type name (m5.large).
	Name string
	// Requirements are the labels a machine of this type carries (arch, os, instance type,
	// provider-specific labels), plus the zones and capacity types of its offerings.
	Requirements requirements.Requirements
	// Capacity is the machine's total resources.
	Capacity corev1.ResourceList
	// Overhead is what the kubelet, the system and eviction thresholds reserve.
	Overhead corev1.ResourceList
	// Offerings are the ways to buy it.
	Offerings []Offering
	// VolumeLimits are, per CSI driver, how many volumes a new machine of this type can attach —
	// what its CSINode will publish, which the kube-scheduler enforces (Karpenter v1.15's
	// per-instance-type volume attach limits). A driver not listed has no limit known.
	VolumeLimits map[string]int64
}

// Allocatable is the capacity left for pods: Capacity − Overhead.
func (it *InstanceType) Allocatable() corev1.ResourceList {
	out := make(corev1.ResourceList, len(it.Capacity))
	for name := range it.Capacity {
		out[name], _ = it.AllocatableOf(name)
	}
	return out
}

// AllocatableOf is the type's allocatable amount of one resource — Allocatable()'s entry, without
// building the list — and whether the type has the resource at all.
func (it *InstanceType) AllocatableOf(name corev1.ResourceName) (resource.Quantity, bool) {
	c, ok := it.Capacity[name]
	if !ok {
		return resource.Quantity{}, false
	}
	a := c.DeepCopy()
	if o, has := it.Overhead[name]; has {
		a.Sub(o)
	}
	if a.Sign() < 0 {
		return resource.Quantity{}, true
	}
	return a, true
}

// Holds is Fits(requests, it.Allocatable()) without building the list.
func (it *InstanceType) Holds(requests corev1.ResourceList) bool {
	for name, q := range requests {
		if a, ok := it.AllocatableOf(name); !ok && !q.IsZero() || ok && q.Cmp(a) > 0 {
			return false
		}
	}
	return true
}

// Fits reports whether allocatable covers every request (a zero request of a resource the type
// lacks is covered): a type that does not is never launched for those requests.
func Fits(requests, allocatable corev1.ResourceList) bool {
	for name, q := range requests {
		if a, ok := allocatable[name]; !ok && !q.IsZero() || ok && q.Cmp(a) > 0 {
			return false
		}
	}
	return true
}

// NewInstanceType builds an instance type whose requirements are its labels plus the zones and
// capacity types of its offerings.
func NewInstanceType(name string, labels map[string]string, capacity, overhead corev1.ResourceList, offerings []Offering) *InstanceType {
	reqs := requirements.FromLabels(labels)
	reqs.Add(requirements.Single(karpv1.InstanceTypeLabelKey, name))
	setOfferingRequirements(&reqs, offerings)
	return &InstanceType{Name: name, Requirements: reqs, Capacity: capacity, Overhead: overhead, Offerings: offerings}
}

// setOfferingRequirements makes the zone and capacity-type requirements those of the offerings,
// and, when some offering is a reservation's, the reservation-id requirement (a pod may ask for
// a reservation by id; only types with one can be it).
func setOfferingRequirements(reqs *requirements.Requirements, offerings []Offering) {
	var zones, cts, reservations []string
	for _, o := range offerings {
		zones = append(zones, o.Zone)
		cts = append(cts, o.CapacityType)
		if o.ReservationID != "" {
			reservations = append(reservations, o.ReservationID)
		}
	}
	reqs.Set(requirements.MustNew(karpv1.ZoneLabelKey, requirements.In, zones...))
	reqs.Set(requirements.MustNew(karpv1.CapacityTypeLabelKey, requirements.In, cts...))
	if len(reservations) > 0 {
		reqs.Set(requirements.MustNew(ReservationIDLabelKey, requirements.In, reservations...))
	}
}
