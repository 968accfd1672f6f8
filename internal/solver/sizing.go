package solver

import (
	"math"
	"slices"

	"capstan.dev/capstan/internal/lp"
)

// priceCapacity sets every pool type's efficiency from the linear relaxation of buying capacity
// for all the solve's pods from the pool: the optimal dual prices value each resource, and a type
// whose capacity is worth its price at those values is one an optimal purchase would use.
func (s *solver) priceCapacity(p *pool) {
	demand := make(vec, s.ri.len())
	for _, c := range s.classes {
		for range c.pods {
			demand.add(c.req)
		}
	}
	var dims []int
	for i, d := range demand {
		if d > 0 {
			dims = append(dims, i)
		}
	}
	if len(dims) == 0 || len(p.types) == 0 {
		return
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
}

// shortlist is how many candidate types a new claim's target is chosen among.
const shortlist = 16

// simulateClasses bounds how many upcoming classes a target's fill is simulated with.
const simulateClasses = 48

// chooseTarget picks the instance type a new claim is filled towards. For the most efficient
// candidates at the batch's dual resource prices it simulates filling a machine with the pods that
// come next in packing order, and picks the one whose packed pods are worth the most per dollar;
// among near-ties, the largest (fewer machines for the same work).
func (s *solver) chooseTarget(p *pool, cands []*itInfo, first *class) *itInfo {
	if len(cands) == 0 {
		return nil
	}
	if p.duals == nil {
		return largest(cands)
	}
	short := slices.Clone(cands)
	slices.SortStableFunc(short, func(a, b *itInfo) int { return cmpFloat(b.efficiency, a.efficiency) })
	if len(short) > shortlist {
		short = short[:shortlist]
	}
	// The pods that will fill the claim: the first pod, then the next classes in order.
	var upcoming []*class
	for i := s.cursor; i < len(s.order) && len(upcoming) < simulateClasses; i++ {
		if c := s.order[i]; c.left > 0 {
			upcoming = append(upcoming, c)
		}
	}
	bestScore := -1.0
	var best *itInfo
	room := make(vec, s.ri.len())
	for _, info := range short {
		copy(room, info.alloc)
		room.sub(first.req)
		value := s.value(p, first.req, 1)
		for _, c := range upcoming {
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
			value += s.value(p, c.req, k)
		}
		score := value / info.minPrice
		switch {
		case best == nil || score > bestScore*1.005:
			best, bestScore = info, score
		case score >= bestScore*0.995 && info.alloc[rCPU] > best.alloc[rCPU]:
			best = info
			bestScore = math.Max(bestScore, score)
		}
	}
	return best
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
