package solver

import (
	"math"
	"math/bits"
	"slices"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// offeringIndex numbers the (zone, capacity type) pairs of all instance types, so that the
// offerings a claim's requirements allow are a bit mask and checking a type is one AND.
type offeringIndex struct {
	zones, cts []string
	// ok is false when there are more than 64 pairs; then masks are not used.
	ok bool
	// slab is where index carves the types' price arrays from.
	slab []float64
}

// newOfferingIndex numbers zones and capacity types in the order the pools' types' offerings
// first name them; with a Cache, each pool's own order is made once and the pools' are merged,
// which is the same order.
func newOfferingIndex(in *Input, cache *Cache) *offeringIndex {
	oi := &offeringIndex{}
	seenZ, seenC := map[string]bool{}, map[string]bool{}
	for i := range in.NodePools {
		var zones, cts []string
		if cache != nil {
			zones, cts = cache.offeringKeys(&in.NodePools[i], in)
		} else {
			zones, cts = offeringKeys(in.NodePools[i].InstanceTypes)
		}
		oi.zones = appendUnseen(oi.zones, seenZ, zones...)
		oi.cts = appendUnseen(oi.cts, seenC, cts...)
	}
	oi.ok = len(oi.zones)*len(oi.cts) <= 64
	return oi
}

// offeringKeys are the zones and capacity types of the types' offerings, in the order they first
// appear.
func offeringKeys(types []*cloudprovider.InstanceType) (zones, cts []string) {
	seenZ, seenC := map[string]bool{}, map[string]bool{}
	for _, it := range types {
		for _, o := range it.Offerings {
			zones = appendUnseen(zones, seenZ, o.Zone)
			cts = appendUnseen(cts, seenC, o.CapacityType)
		}
	}
	return zones, cts
}

// appendUnseen appends the values seen does not hold yet, marking them seen.
func appendUnseen(dst []string, seen map[string]bool, values ...string) []string {
	for _, v := range values {
		if !seen[v] {
			seen[v] = true
			dst = append(dst, v)
		}
	}
	return dst
}

// zoneIndex and ctIndex are a zone's and a capacity type's positions (every offering's are
// listed).
func (oi *offeringIndex) zoneIndex(zone string) int { return slices.Index(oi.zones, zone) }
func (oi *offeringIndex) ctIndex(ct string) int     { return slices.Index(oi.cts, ct) }

func (oi *offeringIndex) index(info *itInfo) {
	if !oi.ok {
		return
	}
	n := len(oi.zones) * len(oi.cts)
	if len(oi.slab) < n {
		// One allocation for many types' prices.
		oi.slab = make([]float64, n*256)
	}
	info.offPrice, oi.slab = oi.slab[:n:n], oi.slab[n:]
	for i := range info.offPrice {
		info.offPrice[i] = math.Inf(1)
	}
	// An offering in a zone or capacity type the type's own requirements exclude cannot be
	// launched; leaving it out of the mask lets a mask check stand for both.
	zoneOK, ctOK := oi.allowed(info.it.Requirements)
	for _, o := range info.it.Offerings {
		if !o.Available {
			continue
		}
		zi, ci := oi.zoneIndex(o.Zone), oi.ctIndex(o.CapacityType)
		if zoneOK&(1<<zi) == 0 || ctOK&(1<<ci) == 0 {
			continue
		}
		b := zi*len(oi.cts) + ci
		info.offMask |= 1 << b
		if o.Price < info.offPrice[b] {
			info.offPrice[b] = o.Price
		}
	}
}

// allowed returns the zones and capacity types reqs allow, a bit per position (masks are used
// only with at most 64 pairs, so each list has at most 64 entries).
func (oi *offeringIndex) allowed(reqs requirements.Requirements) (zones, cts uint64) {
	zone, hasZone := reqs.Get(karpv1.ZoneLabelKey)
	ct, hasCT := reqs.Get(karpv1.CapacityTypeLabelKey)
	for zi, z := range oi.zones {
		if !hasZone || zone.Allows(z) {
			zones |= 1 << zi
		}
	}
	for ci, c := range oi.cts {
		if !hasCT || ct.Allows(c) {
			cts |= 1 << ci
		}
	}
	return zones, cts
}

// mask returns the (zone, capacity type) pairs reqs allow.
func (oi *offeringIndex) mask(reqs requirements.Requirements) uint64 {
	zones, cts := oi.allowed(reqs)
	var m uint64
	for zi := range oi.zones {
		if zones&(1<<zi) == 0 {
			continue
		}
		for ci := range oi.cts {
			if cts&(1<<ci) != 0 {
				m |= 1 << (zi*len(oi.cts) + ci)
			}
		}
	}
	return m
}

// offers reports whether the type has an available offering in mask; of is the fallback when
// masks are off. With masks it also answers whether the type's own zone and capacity-type
// requirements meet the claim's (index leaves out offerings they exclude).
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
		if p := info.offPrice[b]; p < best {
			best = p
		}
		m &= m - 1
	}
	return best + info.nodeCost, true
}
