package solver

import (
	"math"
	"math/bits"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// offeringIndex numbers the (zone, capacity type) pairs of all instance types, so that the
// offerings a claim's requirements allow are a bit mask and checking a type is one AND.
type offeringIndex struct {
	zones, cts []string
	// ok is false when there are more than 64 pairs; then masks are not used.
	ok bool
}

func newOfferingIndex(pools []NodePool) *offeringIndex {
	oi := &offeringIndex{}
	seenZ, seenC := map[string]bool{}, map[string]bool{}
	for i := range pools {
		for _, it := range pools[i].InstanceTypes {
			for _, o := range it.Offerings {
				if !seenZ[o.Zone] {
					seenZ[o.Zone] = true
					oi.zones = append(oi.zones, o.Zone)
				}
				if !seenC[o.CapacityType] {
					seenC[o.CapacityType] = true
					oi.cts = append(oi.cts, o.CapacityType)
				}
			}
		}
	}
	oi.ok = len(oi.zones)*len(oi.cts) <= 64
	return oi
}

func (oi *offeringIndex) bit(zone, ct string) int {
	zi, ci := -1, -1
	for i, z := range oi.zones {
		if z == zone {
			zi = i
		}
	}
	for i, c := range oi.cts {
		if c == ct {
			ci = i
		}
	}
	return zi*len(oi.cts) + ci
}

func (oi *offeringIndex) index(info *itInfo) {
	if !oi.ok {
		return
	}
	info.offPrice = make([]float64, len(oi.zones)*len(oi.cts))
	for i := range info.offPrice {
		info.offPrice[i] = math.Inf(1)
	}
	for _, o := range info.it.Offerings {
		if !o.Available {
			continue
		}
		b := oi.bit(o.Zone, o.CapacityType)
		info.offMask |= 1 << b
		info.offPrice[b] = math.Min(info.offPrice[b], o.Price)
	}
}

// mask returns the (zone, capacity type) pairs reqs allow.
func (oi *offeringIndex) mask(reqs requirements.Requirements) uint64 {
	zone, hasZone := reqs.Get(karpv1.ZoneLabelKey)
	ct, hasCT := reqs.Get(karpv1.CapacityTypeLabelKey)
	var m uint64
	for zi, z := range oi.zones {
		if hasZone && !zone.Allows(z) {
			continue
		}
		for ci, c := range oi.cts {
			if hasCT && !ct.Allows(c) {
				continue
			}
			m |= 1 << (zi*len(oi.cts) + ci)
		}
	}
	return m
}

// offers reports whether the type has an available offering in mask; of is the fallback when
// masks are off.
func (oi *offeringIndex) offers(info *itInfo, mask uint64, of *offeringReqs) bool {
	if oi.ok {
		return info.offMask&mask != 0
	}
	_, ok := of.cheapest(info.it)
	return ok
}

// price is the type's cheapest available offering in mask, plus its pool's per-node cost.
func (oi *offeringIndex) price(info *itInfo, mask uint64, of *offeringReqs) (float64, bool) {
	if !oi.ok {
		p, ok := of.cheapest(info.it)
		return p + info.nodeCost, ok
	}
	m := info.offMask & mask
	if m == 0 {
		return 0, false
	}
	best := math.Inf(1)
	for m != 0 {
		b := bits.TrailingZeros64(m)
		best = math.Min(best, info.offPrice[b])
		m &= m - 1
	}
	return best + info.nodeCost, true
}
