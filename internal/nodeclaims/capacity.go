package nodeclaims

import (
	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodepools"
)

// Candidates are the pool's instance types the claim may launch as: those its requirements allow
// that hold its requests.
func Candidates(nc *karpv1.NodeClaim, types []*cloudprovider.InstanceType) []*cloudprovider.InstanceType {
	reqs, err := nodepools.FromAPI(nc.Spec.Requirements)
	if err != nil {
		return nil
	}
	// A claim names its few instance types among the pool's hundreds: that key first, cheaply.
	names, named := reqs.Get(corev1.LabelInstanceTypeStable)
	var out []*cloudprovider.InstanceType
	for _, it := range types {
		if named {
			if own, ok := it.Requirements.Get(corev1.LabelInstanceTypeStable); ok && !own.Intersects(&names) {
				continue
			}
		}
		if it.Requirements.Overlaps(reqs) && it.Holds(nc.Spec.Resources.Requests) {
			out = append(out, it)
		}
	}
	return out
}

// ExpectedAllocatable is what the claim's machine will offer pods: its allocatable once launched,
// before that the least of its candidates' (nil when it has none).
func ExpectedAllocatable(nc *karpv1.NodeClaim, types []*cloudprovider.InstanceType) corev1.ResourceList {
	if len(nc.Status.Allocatable) > 0 {
		return nc.Status.Allocatable
	}
	cands := Candidates(nc, types)
	if len(cands) == 0 {
		return nil
	}
	alloc := cands[0].Allocatable()
	for _, it := range cands[1:] {
		for k, q := range alloc {
			// A type without the resource offers none of it.
			if a, _ := it.AllocatableOf(k); a.Cmp(q) < 0 {
				alloc[k] = a
			}
		}
	}
	return alloc
}

// OfferingPrice is the hourly price of the offering a machine runs on: its instance type's offering
// in its zone and capacity type, among types; false when the types no longer offer it.
func OfferingPrice(types []*cloudprovider.InstanceType, typeName, zone, capacityType string) (float64, bool) {
	if o := offering(types, typeName, zone, capacityType); o != nil {
		return o.Price, true
	}
	return 0, false
}

// offering is the instance type's offering in the zone and capacity type, among types; nil when
// the types no longer offer it.
func offering(types []*cloudprovider.InstanceType, typeName, zone, capacityType string) *cloudprovider.Offering {
	for _, it := range types {
		if it.Name != typeName {
			continue
		}
		for i := range it.Offerings {
			if o := &it.Offerings[i]; o.Zone == zone && o.CapacityType == capacityType {
				return o
			}
		}
	}
	return nil
}
