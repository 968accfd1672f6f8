package disruptionplan

import (
	"fmt"
	"math"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// cheaper narrows a planned replacement to what is strictly cheaper than the candidates: the
// instance types every one of whose offerings the launch may pick costs less than before, in the
// capacity types the candidates allow. A spot candidate is replaced only by spot, only with
// SpotToSpotConsolidation, and — for one node — only when MinSpotToSpotTypes cheaper spot types
// remain, of which the cheapest MinSpotToSpotTypes are launched (a replacement picked from a
// longer list could again be pricier than the rest, and be replaced in turn).
func (d *decider) cheaper(set []*Candidate, before float64, r *solver.PlannedNodeClaim, single bool) (*solver.PlannedNodeClaim, Blocker) {
	pool := d.pools[r.NodePool]
	nodeCost := 0.0
	if pool != nil {
		nodeCost = pool.Solver.NodeCost
	}
	spot := false
	for _, c := range set {
		spot = spot || c.CapacityType == karpv1.CapacityTypeSpot
	}
	ct, hasCT := r.Requirements.Get(karpv1.CapacityTypeLabelKey)
	tries := [][]string{{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeSpot, karpv1.CapacityTypeReserved}, {karpv1.CapacityTypeSpot}}
	if spot {
		if hasCT && !ct.Allows(karpv1.CapacityTypeSpot) {
			return nil, Blocker{KindSpot, "its pods would need an on-demand machine, and a spot node is never replaced by on-demand"}
		}
		if !d.opts.SpotToSpotConsolidation {
			return nil, Blocker{KindSpot, "SpotToSpotConsolidation is disabled, and a spot node is replaced only by spot"}
		}
		tries = tries[1:]
	}
	cheapest := math.Inf(1)
	for _, cts := range tries {
		reqs := r.Requirements.Clone()
		reqs.Add(requirements.MustNew(karpv1.CapacityTypeLabelKey, requirements.In, cts...))
		var kept []*cloudprovider.InstanceType
		low := math.Inf(1)
		for _, it := range r.InstanceTypes {
			lo, hi, ok := offeringRange(it, reqs)
			if !ok {
				continue
			}
			cheapest = math.Min(cheapest, lo+nodeCost)
			if hi+nodeCost < before {
				kept = append(kept, it)
				low = math.Min(low, lo+nodeCost)
			}
		}
		if len(kept) == 0 {
			continue
		}
		if spot && single && len(kept) < MinSpotToSpotTypes {
			return nil, Blocker{KindSpot, fmt.Sprintf("spot-to-spot consolidation needs %d spot types cheaper than %s, and %d are", MinSpotToSpotTypes, fmtPrice(before), len(kept))}
		}
		// The claim's requirements name only the kept types: the launch picks among what the
		// NodeClaim allows, not among the plan's list.
		out := *r
		out.Requirements = reqs
		if spot && len(kept) > MinSpotToSpotTypes {
			// The cheapest MinSpotToSpotTypes, or as many as the pool's minValues need.
			n := MinSpotToSpotTypes
			for ; n < len(kept); n++ {
				out.InstanceTypes = kept[:n]
				if key, _, _ := out.MinValuesShortfall(); key == "" {
					break
				}
			}
			kept = kept[:n]
		}
		out.SetInstanceTypes(kept)
		if key, want, have := out.MinValuesShortfall(); key != "" {
			if !d.opts.Solver.MinValuesBestEffort {
				return nil, Blocker{KindPrice, fmt.Sprintf("the instance types cheaper than %s have %d value(s) of %s, and its NodePool's minValues asks for %d",
					fmtPrice(before), have, key, want)}
			}
			out.RelaxMinValues()
		}
		out.Price = low
		return &out, Blocker{}
	}
	if math.IsInf(cheapest, 1) {
		return nil, Blocker{KindPrice, "no offering of the replacement's instance types is available"}
	}
	return nil, Blocker{KindPrice, fmt.Sprintf("replacement %s at %s is not cheaper than %s", r.InstanceTypes[0].Name, fmtPrice(cheapest), fmtPrice(before))}
}

// offeringRange is the cheapest and dearest available offering of the type that reqs allow.
func offeringRange(it *cloudprovider.InstanceType, reqs requirements.Requirements) (lo, hi float64, ok bool) {
	zone, hasZone := reqs.Get(karpv1.ZoneLabelKey)
	ct, hasCT := reqs.Get(karpv1.CapacityTypeLabelKey)
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, o := range it.Offerings {
		if !o.Available || hasZone && !zone.Allows(o.Zone) || hasCT && !ct.Allows(o.CapacityType) {
			continue
		}
		lo, hi, ok = math.Min(lo, o.Price), math.Max(hi, o.Price), true
	}
	return lo, hi, ok
}
