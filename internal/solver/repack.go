package solver

import (
	"math"
	"slices"
	"sort"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/requirements"
)

// Repacking. The packing fills claims one after another, each towards a target type chosen by
// simulation; on small batches the machine boundaries it draws can cost more than necessary (two
// pods on an 8-CPU machine that fit a 4-CPU and a 2-CPU machine for less, three claims where two
// mid-size machines would do). After packing, claims whose pods are interchangeable — same pool,
// same requirements, pods without topology, pod affinity, host ports or placement-dependent
// preferences, in a pool without limits — are improved by local search: merge two claims, move
// one pod, or split a claim in two, whenever the cheapest type that holds each resulting group
// costs less in total. Every move keeps each pod on a machine its requirements allow, so the plan
// stays valid; the search is bounded (repackMaxPods pods per group, repackMaxRounds rounds).

// repackMaxPods bounds the pods of one group of interchangeable claims the search works on.
const repackMaxPods = 64

// repackMaxRounds bounds the improvement rounds per group.
const repackMaxRounds = 32

// splitMaxPods bounds the claims tried for a split: every 2-way division of their pods is priced.
const splitMaxPods = 10

// bin is one claim being repacked.
type bin struct {
	t     *target
	pods  []*corev1.Pod
	reqs  []vec
	used  vec
	price float64
}

// repackGroup is the claims of one pool with equal requirements, with the types they may use in
// price order.
type repackGroup struct {
	pool   *pool
	reqs   requirements.Requirements
	types  []*itInfo
	prices []float64
	bins   []*bin
}

func (s *solver) repack() {
	for _, g := range s.interchangeableGroups() {
		n := 0
		for _, b := range g.bins {
			n += len(b.pods)
		}
		if n > repackMaxPods || (len(g.bins) == 1 && len(g.bins[0].pods) == 1) {
			continue
		}
		s.groupTypes(g)
		for _, b := range g.bins {
			b.price = g.cheapest(b.used)
		}
		if n <= exactMaxPods {
			g.exact()
			s.applyRepack(g)
			continue
		}
		for range repackMaxRounds {
			if !g.merge() && !g.move() && !g.split() && !g.repartition() {
				break
			}
		}
		s.applyRepack(g)
	}
}

// interchangeableGroups gathers the planned claims whose pods are interchangeable — same pool,
// same requirements, pods whose placement matters to nothing but their machine's resources, no
// host ports or minValues, a pool without limits — into groups, in the claims' order, each claim
// a bin with its pods' requests.
func (s *solver) interchangeableGroups() []*repackGroup {
	free := s.freePods()
	byKey := map[string]*repackGroup{}
	var groups []*repackGroup
	for _, t := range s.targets {
		if !t.isClaim() || len(t.pods) == 0 || t.pool.capped() || len(t.ports) > 0 || hasMinValues(t.reqs) {
			continue
		}
		movable := true
		for _, p := range t.pods {
			if free[p] == nil {
				movable = false
				break
			}
		}
		if !movable {
			continue
		}
		key := string(rune(t.pool.idx)) + t.reqs.String()
		g, ok := byKey[key]
		if !ok {
			g = &repackGroup{pool: t.pool, reqs: t.reqs}
			byKey[key] = g
			groups = append(groups, g)
		}
		b := &bin{t: t, pods: t.pods, used: t.used.clone()}
		for _, p := range t.pods {
			b.reqs = append(b.reqs, free[p])
		}
		g.bins = append(g.bins, b)
	}
	return groups
}

// freePods are the pods whose placement matters to nothing but their own machine's resources,
// with their requests.
func (s *solver) freePods() map[*corev1.Pod]vec {
	free := map[*corev1.Pod]vec{}
	for _, c := range s.classes {
		if len(c.spreads) > 0 || len(c.affinity) > 0 || len(c.anti) > 0 || len(c.matches) > 0 || len(c.hostPorts) > 0 {
			continue
		}
		ok := true
		for _, p := range c.preferences {
			if p.kind != prefNodeAffinity && p.kind != prefTaints {
				ok = false
			}
		}
		if !ok {
			continue
		}
		for _, p := range c.pods {
			free[p] = c.req
		}
	}
	return free
}

func hasMinValues(rs requirements.Requirements) bool {
	found := false
	rs.Each(func(r requirements.Requirement) { found = found || r.MinValues > 0 })
	return found
}

// groupTypes lists the pool's types the group's requirements allow, with their price under them.
func (s *solver) groupTypes(g *repackGroup) {
	of := offeringFilter(g.reqs)
	mask := s.offerings.mask(g.reqs)
	var ps []priced
	for _, info := range g.pool.types {
		if !info.it.Requirements.Overlaps(g.reqs) {
			continue
		}
		if price, ok := s.offerings.price(info, mask, &of); ok {
			ps = append(ps, priced{info, price})
		}
	}
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].price < ps[j].price })
	for _, p := range ps {
		g.types = append(g.types, p.info)
		g.prices = append(g.prices, p.price)
	}
}

// cheapest is the price of the cheapest type holding used, 0 for nothing, +Inf when none does.
func (g *repackGroup) cheapest(used vec) float64 {
	empty := true
	for _, x := range used {
		if x != 0 {
			empty = false
			break
		}
	}
	if empty {
		return 0
	}
	for i, info := range g.types {
		if used.lessEq(info.alloc) {
			return g.prices[i]
		}
	}
	return math.Inf(1)
}

// improves reports whether a new total is worth a move: strictly cheaper beyond rounding.
func improves(after, before float64) bool { return after < before-1e-9 }

// merge joins the pair of bins whose union saves the most.
func (g *repackGroup) merge() bool {
	bestI, bestJ, bestGain := -1, -1, 0.0
	sum := make(vec, 0)
	for i := range g.bins {
		for j := i + 1; j < len(g.bins); j++ {
			a, b := g.bins[i], g.bins[j]
			sum = append(sum[:0], a.used...)
			sum.add(b.used)
			if p := g.cheapest(sum); improves(p, a.price+b.price) && a.price+b.price-p > bestGain {
				bestI, bestJ, bestGain = i, j, a.price+b.price-p
			}
		}
	}
	if bestI < 0 {
		return false
	}
	g.join(g.bins[bestI], g.bins[bestJ])
	return true
}

// join moves bin b's pods into bin a.
func (g *repackGroup) join(a, b *bin) {
	a.pods = append(a.pods, b.pods...)
	a.reqs = append(a.reqs, b.reqs...)
	a.used.add(b.used)
	a.price = g.cheapest(a.used)
	b.pods, b.reqs, b.used, b.price = nil, nil, make(vec, len(a.used)), 0
}

// move moves the one pod whose move between two bins saves the most.
func (g *repackGroup) move() bool {
	type mv struct{ from, pod, to int }
	best, bestGain := mv{-1, -1, -1}, 0.0
	from, to := make(vec, 0), make(vec, 0)
	for i, a := range g.bins {
		for k := range a.pods {
			from = append(from[:0], a.used...)
			from.sub(a.reqs[k])
			pf := g.cheapest(from)
			for j, b := range g.bins {
				if j == i || len(b.pods) == 0 {
					continue
				}
				to = append(to[:0], b.used...)
				to.add(a.reqs[k])
				before, after := a.price+b.price, pf+g.cheapest(to)
				if improves(after, before) && before-after > bestGain {
					best, bestGain = mv{i, k, j}, before-after
				}
			}
		}
	}
	if best.from < 0 {
		return false
	}
	a, b := g.bins[best.from], g.bins[best.to]
	pod, req := a.pods[best.pod], a.reqs[best.pod]
	a.pods = append(a.pods[:best.pod:best.pod], a.pods[best.pod+1:]...)
	a.reqs = append(a.reqs[:best.pod:best.pod], a.reqs[best.pod+1:]...)
	a.used.sub(req)
	a.price = g.cheapest(a.used)
	b.pods = append(b.pods, pod)
	b.reqs = append(b.reqs, req)
	b.used.add(req)
	b.price = g.cheapest(b.used)
	return true
}

// split divides the bin whose best 2-way division saves the most.
func (g *repackGroup) split() bool {
	bestBin, bestMask, bestGain := -1, 0, 0.0
	for i, b := range g.bins {
		if n := len(b.pods); n < 2 || n > splitMaxPods {
			continue
		}
		if mask, after := g.bestDivision(b.reqs, b.used); improves(after, b.price) && b.price-after > bestGain {
			bestBin, bestMask, bestGain = i, mask, b.price-after
		}
	}
	if bestBin < 0 {
		return false
	}
	b := g.bins[bestBin]
	nb := &bin{}
	g.divide(b, nb, b.pods, b.reqs, bestMask)
	g.bins = append(g.bins, nb)
	return true
}

// bestDivision finds the cheapest division of reqs (which sum to total) between two machines:
// bit k of mask sends reqs[k] to the second, and the last always stays with the first, so each
// division is tried once. It returns the mask and the two machines' price (+Inf when none holds).
func (g *repackGroup) bestDivision(reqs []vec, total vec) (int, float64) {
	n := len(reqs)
	bestMask, best := 0, math.Inf(1)
	left, right := make(vec, len(total)), make(vec, len(total))
	for mask := 1; mask < 1<<(n-1); mask++ {
		copy(left, total)
		clear(right)
		for k := range n - 1 {
			if mask&(1<<k) != 0 {
				left.sub(reqs[k])
				right.add(reqs[k])
			}
		}
		if after := g.cheapest(left) + g.cheapest(right); after < best {
			bestMask, best = mask, after
		}
	}
	return bestMask, best
}

// divide refills bins a and b with the pods as mask divides them (see bestDivision).
func (g *repackGroup) divide(a, b *bin, pods []*corev1.Pod, reqs []vec, mask int) {
	pods, reqs = slices.Clone(pods), slices.Clone(reqs)
	dims := len(reqs[0])
	a.pods, a.reqs, a.used = nil, nil, make(vec, dims)
	b.pods, b.reqs, b.used = nil, nil, make(vec, dims)
	for k := range pods {
		dst := a
		if k < len(pods)-1 && mask&(1<<k) != 0 {
			dst = b
		}
		dst.pods = append(dst.pods, pods[k])
		dst.reqs = append(dst.reqs, reqs[k])
		dst.used.add(reqs[k])
	}
	a.price, b.price = g.cheapest(a.used), g.cheapest(b.used)
}

// exactMaxPods bounds the groups whose every partition into machines is priced (Bell(7) = 877).
const exactMaxPods = 7

// exact replaces the bins by the cheapest partition of their pods, each block on the cheapest
// type that holds it; partial partitions that already cost more than the best are cut.
func (g *repackGroup) exact() {
	var pods []*corev1.Pod
	var reqs []vec
	best := 0.0
	for _, b := range g.bins {
		pods = append(pods, b.pods...)
		reqs = append(reqs, b.reqs...)
		best += b.price
	}
	dims := len(g.bins[0].used)
	assign := make([]int, len(pods))
	bestAssign := []int(nil)
	var blocks []vec
	var prices []float64
	var rec func(k int, cost float64)
	rec = func(k int, cost float64) {
		if !improves(cost, best) {
			return
		}
		if k == len(pods) {
			best, bestAssign = cost, append(bestAssign[:0], assign...)
			return
		}
		for bi := range blocks {
			old := prices[bi]
			blocks[bi].add(reqs[k])
			prices[bi] = g.cheapest(blocks[bi])
			assign[k] = bi
			rec(k+1, cost-old+prices[bi])
			blocks[bi].sub(reqs[k])
			prices[bi] = old
		}
		nb := make(vec, dims)
		nb.add(reqs[k])
		blocks, prices = append(blocks, nb), append(prices, g.cheapest(nb))
		assign[k] = len(blocks) - 1
		rec(k+1, cost+prices[len(prices)-1])
		blocks, prices = blocks[:len(blocks)-1], prices[:len(prices)-1]
	}
	rec(0, 0)
	if bestAssign == nil {
		return
	}
	var bins []*bin
	for k, bi := range bestAssign {
		for len(bins) <= bi {
			nb := &bin{used: make(vec, dims)}
			if len(bins) < len(g.bins) {
				nb.t = g.bins[len(bins)].t
			}
			bins = append(bins, nb)
		}
		bins[bi].pods = append(bins[bi].pods, pods[k])
		bins[bi].reqs = append(bins[bi].reqs, reqs[k])
		bins[bi].used.add(reqs[k])
	}
	for i := len(bins); i < len(g.bins); i++ {
		// Claims no longer needed keep their target with no pods, and are dropped.
		bins = append(bins, &bin{t: g.bins[i].t, used: make(vec, dims)})
	}
	for _, b := range bins {
		b.price = g.cheapest(b.used)
	}
	g.bins = bins
}

// repartitionMaxBins bounds the groups whose pairs of claims are re-divided.
const repartitionMaxBins = 16

// repartition re-divides the pods of the pair of bins whose best 2-way division of their union
// saves the most (a swap, or several moves at once).
func (g *repackGroup) repartition() bool {
	if len(g.bins) > repartitionMaxBins {
		return false
	}
	bestI, bestJ, bestMask, bestGain := -1, -1, 0, 0.0
	var both []vec
	total := make(vec, 0)
	for i := range g.bins {
		for j := i + 1; j < len(g.bins); j++ {
			a, b := g.bins[i], g.bins[j]
			if len(a.pods) == 0 || len(b.pods) == 0 || len(a.pods)+len(b.pods) > splitMaxPods {
				continue
			}
			both = append(append(both[:0], a.reqs...), b.reqs...)
			total = append(total[:0], a.used...)
			total.add(b.used)
			before := a.price + b.price
			if mask, after := g.bestDivision(both, total); improves(after, before) && before-after > bestGain {
				bestI, bestJ, bestMask, bestGain = i, j, mask, before-after
			}
		}
	}
	if bestI < 0 {
		return false
	}
	a, b := g.bins[bestI], g.bins[bestJ]
	g.divide(a, b, append(slices.Clone(a.pods), b.pods...), append(slices.Clone(a.reqs), b.reqs...), bestMask)
	return true
}

// applyRepack writes the bins back as claims: each keeps its target (a new bin gets one), holds
// its pods, and may launch as any of the group's types that hold them.
func (s *solver) applyRepack(g *repackGroup) {
	for _, b := range g.bins {
		t := b.t
		if t == nil {
			if len(b.pods) == 0 {
				continue
			}
			t = &target{id: len(s.targets), pool: g.pool, reqs: g.reqs.Clone(), alloc: make(vec, len(b.used))}
			s.targets = append(s.targets, t)
		}
		t.pods, t.used = b.pods, b.used
		var cands []*itInfo
		for _, info := range g.types {
			if b.used.lessEq(info.alloc) {
				cands = append(cands, info)
			}
		}
		t.cap = nil
		t.setCandidates(cands)
	}
	s.dropEmptyClaims()
}
