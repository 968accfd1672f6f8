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
}

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
	var zones, cts []string
	for _, o := range offerings {
		zones = append(zones, o.Zone)
		cts = append(cts, o.CapacityType)
	}
	reqs.Add(requirements.MustNew(karpv1.ZoneLabelKey, requirements.In, zones...))
	reqs.Add(requirements.MustNew(karpv1.CapacityTypeLabelKey, requirements.In, cts...))
	return &InstanceType{Name: name, Requirements: reqs, Capacity: capacity, Overhead: overhead, Offerings: offerings}
}
