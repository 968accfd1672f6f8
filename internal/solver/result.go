package solver

import (
	"math"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// commit records the pod on the target.
func (s *solver) commit(v *variant, t *target, pod *corev1.Pod, cands []*itInfo, reqs *requirements.Requirements, reqsChanged bool) {
	s.version++
	t.used.add(v.class.req)
	t.pods = append(t.pods, pod)
	t.ports = append(t.ports, v.class.hostPorts...)
	if t.isClaim() {
		if reqs != nil && reqsChanged {
			t.reqs = *reqs
		}
		if t.fixed == nil || reqsChanged {
			t.refreshFixed(s.topoKeys)
		}
		t.setCandidates(cands)
		t.closed = s.full(t)
		s.updateRoom(t)
	}
	owned := map[int]bool{}
	for _, a := range v.class.anti {
		owned[a.group] = true
	}
	for _, gi := range v.class.matches {
		g := s.groups[gi]
		d, _ := t.domain(g.key)
		g.record(t, d, true, owned[gi])
		delete(owned, gi)
	}
	for gi := range owned {
		g := s.groups[gi]
		d, _ := t.domain(g.key)
		g.record(t, d, false, true)
	}
	for _, sc := range v.class.spreads {
		if g := s.groups[sc.group]; g.hostname {
			g.bound(t, sc.maxSkew)
		}
	}
}

// full reports whether no pod of the solve could fit in what the claim has left.
func (s *solver) full(t *target) bool { return s.noPodFits(t.alloc, t.used) }

// noPodFits reports whether what limit leaves beyond used (nil: nothing) is below the smallest
// request of every pod of the solve in CPU, memory or pods.
func (s *solver) noPodFits(limit, used vec) bool {
	for _, i := range [3]int{rCPU, rMemory, rPods} {
		u := int64(0)
		if used != nil {
			u = used[i]
		}
		if s.minReq[i] > 0 && limit[i]-u < s.minReq[i] {
			return true
		}
	}
	return false
}

// dropEmptyClaims removes the claims left without pods (dissolved, or repacked away).
func (s *solver) dropEmptyClaims() {
	kept := s.targets[:0]
	for _, t := range s.targets {
		if !t.isClaim() || len(t.pods) > 0 {
			kept = append(kept, t)
		}
	}
	s.targets = kept
}

// finish turns planned claims into the result.
func (s *solver) finish() {
	s.slots = reservationSlots(&s.in)
	for _, t := range s.targets {
		if !t.isClaim() {
			continue
		}
		if s.slots != nil {
			if err := s.reserve(t); err != nil {
				s.unreserved(t, err)
				continue
			}
		}
		s.result.NodeClaims = append(s.result.NodeClaims, s.plannedClaim(t))
	}
}

// claims is how many NodeClaims the plan buys.
func (s *solver) claims() int {
	n := 0
	for _, t := range s.targets {
		if t.isClaim() {
			n++
		}
	}
	return n
}

// planPrice is what finish's claims cost together: each claim's cheapest candidate offering its
// requirements allow (PlannedNodeClaim.Price), without sorting or bounding the candidates.
func (s *solver) planPrice() float64 {
	var sum float64
	for _, t := range s.targets {
		if !t.isClaim() {
			continue
		}
		of := offeringFilter(t.reqs)
		if best := s.cheapestHolding(t, t.used, s.offerings.mask(t.reqs), &of); !math.IsInf(best, 1) {
			sum += best
		}
	}
	return sum
}

// cheapestHolding is the price, under the offerings mask and of allow, of the cheapest of t's
// candidates that holds used; +Inf when none does.
func (s *solver) cheapestHolding(t *target, used vec, mask uint64, of *offeringReqs) float64 {
	best := math.Inf(1)
	for _, info := range t.candidates {
		if info.minPrice >= best {
			// A claim's candidates come cheapest first (by pool price, or by this very price
			// after a repack), and no claim pays less than a type's pool price.
			break
		}
		if !used.lessEq(info.alloc) {
			continue
		}
		if price, ok := s.offerings.price(info, mask, of); ok && price < best {
			best = price
		}
	}
	return best
}

// priced is a candidate with its price under a claim's requirements.
type priced struct {
	info  *itInfo
	price float64
}

func (s *solver) plannedClaim(t *target) *PlannedNodeClaim {
	if cap(s.priced) < len(t.candidates) {
		s.priced = make([]priced, 0, len(t.candidates))
	}
	ps := s.priced[:0]
	defer func() { s.priced = ps[:0] }()
	of := offeringFilter(t.reqs)
	mask := s.offerings.mask(t.reqs)
	// Candidates come by pool price, and none is priced below it under the claim: once the bound
	// is reached, a candidate whose pool price exceeds every price kept cannot be among the
	// cheapest, nor can any after it. (minValues may need candidates past the bound.)
	bounded := !hasMinValues(t.reqs)
	worst := 0.0
	for _, info := range t.candidates {
		if bounded && len(ps) >= s.opts.MaxInstanceTypes && info.minPrice > worst {
			break
		}
		price, ok := s.offerings.price(info, mask, &of)
		if ok {
			ps = append(ps, priced{info, price})
			worst = max(worst, price)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		if ps[i].price != ps[j].price {
			return ps[i].price < ps[j].price
		}
		return ps[i].info.it.Name < ps[j].info.it.Name
	})
	keep := min(len(ps), s.opts.MaxInstanceTypes)
	chosen := ps[:keep]
	// Extend past the bound only as far as minValues needs.
	for keep < len(ps) {
		infos := make([]*itInfo, len(chosen))
		for i, p := range chosen {
			infos[i] = p.info
		}
		if s.minValuesShortfall(infos, t.reqs) == "" {
			break
		}
		keep++
		chosen = ps[:keep]
	}
	nc := &PlannedNodeClaim{NodePool: t.pool.np.Name, Pods: t.pods, Requirements: t.reqs.Clone()}
	its := make([]*cloudprovider.InstanceType, 0, len(chosen))
	final := make([]*itInfo, 0, len(chosen))
	// The claim's requests are its pods' plus the DaemonSet overhead every candidate carries, so
	// that each candidate's allocatable holds them.
	requests := make(vec, len(t.used))
	for i, p := range chosen {
		its = append(its, p.info.it)
		final = append(final, p.info)
		if i == 0 {
			copy(requests, p.info.daemon)
		} else {
			requests.minInto(p.info.daemon)
		}
	}
	requests.add(t.used)
	nc.Requests = s.ri.list(requests)
	for _, d := range s.attachDims {
		// Volume attachments are checked against nodes, not asked of the cloud.
		delete(nc.Requests, s.ri.names[d])
	}
	if len(chosen) > 0 {
		nc.Price = chosen[0].price
	}
	nc.SetInstanceTypes(its)
	if s.opts.MinValuesBestEffort {
		// As Karpenter's BestEffort: a NodeClaim whose requirement asks for more values than it
		// lists is refused by the API server.
		nc.RelaxMinValues()
	}
	t.setCandidates(final)
	return nc
}
