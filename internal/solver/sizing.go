package solver

import (
	"math"
	"slices"

	"capstan.dev/capstan/internal/lp"
)

// priceCapacity sets every pool type's efficiency from the linear relaxation of buying capacity
// for all the solve's pods (demand, their summed requests) from the pool: the optimal dual prices
// value each resource, and a type whose capacity is worth its price at those values is one an
// optimal purchase would use.
func (s *solver) priceCapacity(p *pool, demand vec) {
	var dims []int
	for i, d := range demand {
		if d > 0 {
			dims = append(dims, i)
		}
	}
	if len(dims) == 0 || len(p.types) == 0 {
		return
	}
	switch {
	case s.opts.LargestAtTies:
		p.granule = math.MaxInt64
	case p.limited != nil && p.limited[rCPU] && p.remaining[rCPU] < 2*demand[rCPU]:
		// A CPU limit that may bind: pods are refused for it while claims are packed, before
		// leftover claims are dissolved into others, and with many smaller claims (each reserving
		// up to its dearest candidate) a pod can be refused where the final plan leaves room.
		p.granule = math.MaxInt64
	default:
		p.granule = max(demand[rCPU]/burstShare, minGranule)
	}
	a := make([][]float64, len(p.types))
	c := make([]float64, len(p.types))
	b := make([]float64, len(dims))
	for j, info := range p.types {
		row := make([]float64, len(dims))
		for i, d := range dims {
			// Each resource is scaled so its demand is 1, which keeps the tableau well conditioned.
			row[i] = float64(info.alloc[d]) / float64(demand[d])
		}
		a[j] = row
		c[j] = info.minPrice
	}
	for i := range b {
		b[i] = 1
	}
	sol, err := lp.Cover(a, c, b)
	if err != nil {
		// Some resource no type has (the pods that need it cannot use this pool): no guidance.
		return
	}
	p.dims, p.duals = dims, make([]float64, len(dims))
	for i, d := range dims {
		// The dual price of one milli-unit of the resource.
		p.duals[i] = sol.Y[i] / float64(demand[d])
	}
	for j, info := range p.types {
		value := 0.0
		for i := range dims {
			value += sol.Y[i] * a[j][i]
		}
		if info.minPrice > 0 {
			info.efficiency = value / info.minPrice
		}
	}
	p.sortByEfficiency()
}

// shortlist is how many candidate types a new claim's target is chosen among.
const shortlist = 16

// simulateClasses bounds how many upcoming classes a target's fill is simulated with.
const simulateClasses = 48

// burstShare is how many machines, at least, a solve's CPU demand is spread over when machine
// sizes tie on price: among near-tied targets the solver prefers the largest holding at most
// 1/burstShare of the demand. A scale-in that later empties machines in a fixed order (the pod
// deletion costs) stops inside one machine and leaves on average half of it unused; over scale-ins
// of any size that expected waste is Σs²/2S for machines of s vCPU in a burst of S, so bursts of
// at most S/8-vCPU machines leave at most 1/16 of the burst unused where one machine of half the
// burst could leave a quarter (docs/solver.md, "Plan shape").
const burstShare = 8

// minGranule (milli-CPU) is the machine size near-ties may always reach: a small batch is not
// split into machines smaller than its pods need, where per-node costs (kubelet and DaemonSet
// reservations, addresses, API objects) outweigh the little a scale-in could leave unused.
const minGranule = 8000

// nearTie is the relative score within which targets count as equally good per dollar. It is
// wider than the fractions per-node overheads cost smaller machines (on a menu priced in
// proportion to size with 100m reserved per node, a 32-vCPU machine filled with 1-CPU pods and
// topped up with 250m ones scores 0.52% below a 96-vCPU one), so that those fractions do not push a
// burst onto machines larger than its eighth; a burst costs at most 1% more for it.
const nearTie = 0.01

// chooseTarget picks the instance type a new claim is filled towards. For the most efficient
// candidates at the batch's dual resource prices it simulates filling a machine with the pods that
// come next in packing order, and picks the one whose packed pods are worth the most per dollar;
// among near-ties, the one sized by preferSize.
func (s *solver) chooseTarget(p *pool, cands []*itInfo, first *class) *itInfo {
	if len(cands) == 0 {
		return nil
	}
	if p.duals == nil {
		return largest(cands)
	}
	short := p.mostEfficient(cands, shortlist)
	// The relaxation prices resources as if they could be bought apart (pod slots from one type,
	// memory from another), so its favourites can miss the type that holds the most of the
	// claim's first pods per dollar; those are simulated too, when resources alone decide how
	// many of them fit (no topology, pod affinity or host ports).
	if first.plain() {
		short = withBestForClass(short, cands, first, fillLeaders)
	}
	// The pods that will fill the claim: the first pod, then the next classes in order.
	var upcoming []*class
	for i := s.cursor; i < len(s.order) && len(upcoming) < simulateClasses; i++ {
		if c := s.order[i]; c.left > 0 {
			upcoming = append(upcoming, c)
		}
	}
	// Each upcoming class's pods are worth the same on every type simulated.
	unit := make([]float64, len(upcoming))
	for j, c := range upcoming {
		unit[j] = s.value(p, c.req, 1)
	}
	scores := make([]float64, len(short))
	top := -1.0
	room := make(vec, s.ri.len())
	for si, info := range short {
		copy(room, info.alloc)
		room.sub(first.req)
		value := s.value(p, first.req, 1)
		for j, c := range upcoming {
			n := c.left
			if c == first {
				n--
			}
			k := fitCount(room, c.req, n)
			if k == 0 {
				continue
			}
			for i := range room {
				room[i] -= int64(k) * c.req[i]
			}
			value += unit[j] * float64(k)
			if s.noPodFits(room, nil) {
				// No pod of the solve fits what is left.
				break
			}
		}
		scores[si] = value / info.minPrice
		top = math.Max(top, scores[si])
	}
	var best *itInfo
	for si, info := range short {
		if scores[si] >= top*(1-nearTie) && (best == nil || preferSize(info, best, p.granule)) {
			best = info
		}
	}
	return best
}

// preferSize says whether a is preferred to b among near-tied targets: the larger of two
// machines within granule CPU, a machine within it over one above it, and the smaller of two
// above it (the one closest to the granule). Equal sizes keep b, the earlier (more efficient).
func preferSize(a, b *itInfo, granule int64) bool {
	ac, bc := a.alloc[rCPU], b.alloc[rCPU]
	aIn, bIn := ac <= granule, bc <= granule
	switch {
	case aIn != bIn:
		return aIn
	case aIn:
		return ac > bc
	default:
		return ac < bc
	}
}

// mostEfficient returns the k most efficient of cands, most efficient first, ties in cands'
// order: the first k of a stable sort by efficiency. cands must be some of the pool's types, in
// the pool's order (every new claim's are), so the answer is the pool's types in efficiency
// order (sorted once, by sortByEfficiency) that are among cands — no sort per claim.
func (p *pool) mostEfficient(cands []*itInfo, k int) []*itInfo {
	if len(p.mark) != len(p.types) {
		p.mark = make([]uint32, len(p.types))
	}
	p.epoch++
	if p.epoch == 0 {
		// Wrapped: old marks could match again.
		clear(p.mark)
		p.epoch = 1
	}
	for _, info := range cands {
		p.mark[info.pos] = p.epoch
	}
	short := make([]*itInfo, 0, min(k, len(cands)))
	for _, info := range p.byEfficiency {
		if len(short) == cap(short) {
			break
		}
		if p.mark[info.pos] == p.epoch {
			short = append(short, info)
		}
	}
	return short
}

// sortByEfficiency orders the pool's types by efficiency, most efficient first, ties in the
// pool's order, for mostEfficient.
func (p *pool) sortByEfficiency() {
	p.byEfficiency = slices.Clone(p.types)
	slices.SortStableFunc(p.byEfficiency, func(a, b *itInfo) int { return cmpFloat(b.efficiency, a.efficiency) })
}

// topK returns the positions of the k highest of n scores, highest first, equal scores in
// position order: the first k of a stable sort, in O(n·k) at worst and O(n) when few displace.
func topK(n, k int, score func(int) float64) []int32 {
	// Positions, not pointers: shifting them costs no GC write barriers.
	top := make([]int32, 0, min(k, n))
	for ci := range n {
		sc := score(ci)
		if len(top) == k && sc <= score(int(top[k-1])) {
			continue
		}
		// After the last kept entry at least as high (earlier ties stay ahead).
		i := len(top)
		for i > 0 && score(int(top[i-1])) < sc {
			i--
		}
		if len(top) < k {
			top = append(top, 0)
		}
		copy(top[i+1:], top[i:len(top)-1])
		top[i] = int32(ci)
	}
	return top
}

// plain reports whether only resources limit how many of the class's pods a machine holds.
func (c *class) plain() bool {
	return len(c.spreads) == 0 && len(c.affinity) == 0 && len(c.anti) == 0 && len(c.hostPorts) == 0
}

// fillLeaders is how many types holding the most of the first class's pods per dollar join the
// shortlist.
const fillLeaders = 4

// withBestForClass adds to short the n candidates that hold the most pods of class c per dollar
// (fewer when short has them already), in cands' order among equals.
func withBestForClass(short, cands []*itInfo, c *class, n int) []*itInfo {
	perUSD := make([]float64, len(cands))
	for i, info := range cands {
		if info.minPrice > 0 {
			perUSD[i] = float64(fitCount(info.alloc, c.req, max(c.left, 1))) / info.minPrice
		}
	}
	for _, i := range topK(len(cands), n, func(i int) float64 { return perUSD[i] }) {
		if info := cands[i]; perUSD[i] > 0 && !slices.Contains(short, info) {
			short = append(short, info)
		}
	}
	return short
}

func (s *solver) value(p *pool, req vec, k int) float64 {
	v := 0.0
	for i, d := range p.dims {
		v += p.duals[i] * float64(req[d]) * float64(k)
	}
	return v
}

// fitCount is how many of n pods of size req fit in room.
func fitCount(room, req vec, n int) int {
	k := n
	for i := range room {
		if req[i] > 0 {
			k = min(k, int(room[i]/req[i]))
		}
	}
	return max(k, 0)
}

func largest(cands []*itInfo) *itInfo {
	var t *itInfo
	for _, info := range cands {
		if t == nil || info.alloc[rCPU] > t.alloc[rCPU] {
			t = info
		}
	}
	return t
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
