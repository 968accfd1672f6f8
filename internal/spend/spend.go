// Package spend prices machines against spending limits: a NodePool's (its limits key
// LimitKey, in dollars per hour) and the cluster's (--spending-limit). A limit is as hard as the
// pool's other limits: a machine counts from the moment its NodeClaim exists, at the most it may
// cost until it is launched (the dearest offering its requirements allow of any type it may
// launch as), then at the price of the offering it runs on. A reserved offering counts at the
// on-demand price its reservation bills, used or not, not at the near-zero price plans compare
// it at. What a NodeClaim counts is nodeclaims.Spend.
package spend

import (
	"math"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// LimitKey is the NodePool limits key of a spending limit, in dollars per hour (the cloud's
// prices: US dollars on AWS): `spec.limits: {capstan.dev/dollars-per-hour: "25"}`. Karpenter's
// CRD admits any key in limits and Karpenter counts only resources its machines have, so a
// manifest carrying it stays valid for Karpenter, which ignores it.
const LimitKey corev1.ResourceName = "capstan.dev/dollars-per-hour"

// Billed is what an offering costs per hour against a spending limit: its price, or for a
// reserved offering the on-demand price of the reservation.
func Billed(o *cloudprovider.Offering) float64 {
	if o.CapacityType == karpv1.CapacityTypeReserved {
		return cloudprovider.ReservedOnDemand(o.Price)
	}
	return o.Price
}

// WorstCase is the most a machine of the type may cost among the offerings reqs allow (available
// or not: an offering unavailable now may be available at launch), and false when reqs allow
// none.
func WorstCase(it *cloudprovider.InstanceType, reqs requirements.Requirements) (float64, bool) {
	zone, hasZone := reqs.Get(karpv1.ZoneLabelKey)
	ct, hasCT := reqs.Get(karpv1.CapacityTypeLabelKey)
	worst, found := 0.0, false
	for i := range it.Offerings {
		o := &it.Offerings[i]
		if hasZone && !zone.Allows(o.Zone) || hasCT && !ct.Allows(o.CapacityType) {
			continue
		}
		worst, found = max(worst, Billed(o)), true
	}
	return worst, found
}

// Milli is a price in the milli-dollars the solver's limit arithmetic counts, rounded up so that a
// sum of them never understates what the machines cost.
func Milli(dollarsPerHour float64) int64 {
	return int64(math.Ceil(dollarsPerHour*1000 - 1e-9))
}
