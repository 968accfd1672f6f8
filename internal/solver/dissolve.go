package solver

import (
	"cmp"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// Dissolving. The packing fills each claim to the size of its target type before it opens the
// next, so the pods left when every open claim has reached its target open claims of their own,
// often small and half empty. After packing, such a claim is dissolved when its pods fit into
// other claims grown past their targets for no more, in all, than the claim costs: the plan buys
// fewer machines for the same price or less.
//
// A claim is dissolved only when none of its pods has pod affinity, anti-affinity, host ports or
// preferences other than node affinity and PreferNoSchedule taints, and a moved pod keeps every
// count that topology constraints read:
//   - it joins only a claim with the same values of the topology keys of the groups that match it
//     and of its own spread constraints (so zone counts are unchanged);
//   - never a claim holding a pod whose hostname anti-affinity selects it;
//   - never a claim where a hostname spread constraint that selects it, its own or a pod's there,
//     would see more matching pods than its maxSkew (see overSkew);
//   - its required node affinity, tolerations and preferred node affinity are met by the claim
//     as they were by the one it leaves, without narrowing the claim's requirements.
//
// Pods stay in their claim's pool (it is the heaviest that took them). In a pool with limits the
// dissolved claim's reservation goes back to the pool, and a grown claim keeps only candidates it
// had, so what it reserves (the largest of them) can only shrink.

// dissolveMaxClaims bounds the claims tried per packing, dissolveMaxFailures the claims tried
// in a row that cannot be dissolved, and dissolveMaxPriced the moves priced in all.
const (
	dissolveMaxClaims   = 512
	dissolveMaxFailures = 16
	dissolveMaxPriced   = 1 << 20
)

// receiver is what the dissolving knows of an open claim that may take pods.
type receiver struct {
	// price is the claim's price now (the cheapest candidate holding its pods); known once set.
	price float64
	known bool
	// of and mask are the offerings the claim's requirements allow (they do not change here).
	of      offeringReqs
	mask    uint64
	ofKnown bool
}

type meetsKey struct {
	v *variant
	t int
}

// move is one pod's planned move to an open claim.
type move struct {
	pod *corev1.Pod
	v   *variant
	to  *target
}

type dissolver struct {
	s *solver
	// classOf are the movable pods' classes.
	classOf map[*corev1.Pod]*class
	recv    []receiver
	gone    []bool
	// receivers are the open claims of each pool (by index) that may take pods; meetsCache says
	// which variants a claim meets.
	receivers  map[int][]*target
	meetsCache map[meetsKey]bool
	// extra is what the planned moves add to each open claim (by open index), and extraCount the
	// hostname groups' counts they add, by group and open index.
	extra      map[int]vec
	extraCount map[[2]int]int32
	// extraSkew is the smallest maxSkew of the hostname spread constraints the planned moves
	// bring, by group and open index.
	extraSkew map[[2]int]int32
	// priced counts the moves priced.
	priced int
}

func (s *solver) dissolve() {
	if len(s.open) < 2 {
		return
	}
	// The pods that may move, with their classes.
	classOf := map[*corev1.Pod]*class{}
	for _, c := range s.classes {
		if movableClass(c) {
			for _, p := range c.pods {
				classOf[p] = c
			}
		}
	}
	if len(classOf) == 0 {
		return
	}
	var tries []*target
	for _, t := range s.open {
		if len(t.pods) > 0 && !hasMinValues(t.reqs) && !slices.ContainsFunc(t.pods, func(p *corev1.Pod) bool { return classOf[p] == nil }) {
			tries = append(tries, t)
		}
	}
	if len(tries) == 0 {
		return
	}
	d := &dissolver{s: s, classOf: classOf, recv: make([]receiver, len(s.open)), gone: make([]bool, len(s.open)),
		receivers: map[int][]*target{}, meetsCache: map[meetsKey]bool{}}
	// The cheapest claims are the likeliest to be absorbed; among equals, the latest (the
	// leftovers of the packing).
	prices := make(map[*target]float64, len(tries))
	for _, t := range tries {
		prices[t] = d.price(t)
	}
	slices.SortStableFunc(tries, func(a, b *target) int {
		if c := cmpFloat(prices[a], prices[b]); c != 0 {
			return c
		}
		return b.openIdx - a.openIdx
	})
	if len(tries) > dissolveMaxClaims {
		tries = tries[:dissolveMaxClaims]
	}
	removed, failures := false, 0
	for _, t := range tries {
		if d.priced >= dissolveMaxPriced {
			break
		}
		moves, ok := d.plan(t, prices[t])
		if !ok {
			// The cheapest claims are the easiest to absorb: after a run of failures, the
			// dearer ones are not worth pricing.
			if failures++; failures == dissolveMaxFailures {
				break
			}
			continue
		}
		failures = 0
		d.apply(t, moves)
		removed = true
	}
	if removed {
		s.dropEmptyClaims()
	}
}

// movableClass reports whether a class's pods may be moved: their placement is constrained by
// resources, node requirements and topology spread only.
func movableClass(c *class) bool {
	if len(c.affinity) > 0 || len(c.anti) > 0 || len(c.hostPorts) > 0 || c.err != nil {
		return false
	}
	for _, p := range c.preferences {
		if p.kind != prefNodeAffinity && p.kind != prefTaints {
			return false
		}
	}
	return true
}

// plan finds where each of t's pods would go, and reports whether all of them can go for no more
// than price in all.
func (d *dissolver) plan(t *target, price float64) ([]move, bool) {
	pods := slices.Clone(t.pods)
	// The largest first: they have the fewest places to go.
	slices.SortStableFunc(pods, func(a, b *corev1.Pod) int {
		ra, rb := d.classOf[a].req, d.classOf[b].req
		if c := cmp.Compare(rb[rCPU], ra[rCPU]); c != 0 {
			return c
		}
		return cmp.Compare(rb[rMemory], ra[rMemory])
	})
	d.extra, d.extraCount, d.extraSkew = map[int]vec{}, map[[2]int]int32{}, map[[2]int]int32{}
	// Each pod may add its share of what is left of the claim's price (by its largest fraction
	// of the claim's CPU or memory): the first claim that takes it for that is good enough, so
	// most pods are placed without pricing every claim; the cheapest is looked for only when
	// none does.
	weights := make([]float64, len(pods))
	left := 0.0
	for i, p := range pods {
		req := d.classOf[p].req
		for _, r := range [2]int{rCPU, rMemory} {
			if t.used[r] > 0 {
				weights[i] = max(weights[i], float64(req[r])/float64(t.used[r]))
			}
		}
		left += weights[i]
	}
	added := 0.0
	moves := make([]move, 0, len(pods))
	rs := d.receiversOf(t.pool)
	start := 0
	for i, p := range pods {
		c := d.classOf[p]
		level := d.levelOn(c, t)
		if level < 0 {
			return nil, false
		}
		share := 0.0
		if left > 0 {
			share = (price - added) * weights[i] / left
		}
		left -= weights[i]
		best, bestCost, at := d.cheapestMove(p, c, level, t, rs, start, share)
		if best.to == nil {
			return nil, false
		}
		added += bestCost
		if added > price+1e-9 {
			return nil, false
		}
		d.reserve(c, best.to)
		moves = append(moves, best)
		start = at
	}
	return moves, true
}

// cheapestMove moves pod p (of class c, from claim from) to the first of the claims rs, from
// index start on and round, that takes it for no more than share; else to the one that adds the
// least to the plan's price. It returns the move, what it adds (+Inf when no claim may take the
// pod) and the claim's index in rs.
func (d *dissolver) cheapestMove(p *corev1.Pod, c *class, level int, from *target, rs []*target, start int, share float64) (move, float64, int) {
	var best move
	bestCost, bestAt := math.Inf(1), 0
	for k := range rs {
		i := (start + k) % len(rs)
		r := rs[i]
		if r == from || d.gone[r.openIdx] {
			continue
		}
		cost, v, ok := d.cost(c, level, from, r)
		d.priced++
		if ok && cost < bestCost-1e-12 {
			best, bestCost, bestAt = move{pod: p, v: v, to: r}, cost, i
			if cost <= share+1e-12 {
				break
			}
		}
	}
	return best, bestCost, bestAt
}

// receiversOf are the open claims of pool p that may take pods: those with pods and without
// minValues (growing one would have to keep them).
func (d *dissolver) receiversOf(p *pool) []*target {
	if rs, ok := d.receivers[p.idx]; ok {
		return rs
	}
	var rs []*target
	for _, r := range d.s.open {
		if r.pool == p && len(r.pods) > 0 && !hasMinValues(r.reqs) {
			rs = append(rs, r)
		}
	}
	d.receivers[p.idx] = rs
	return rs
}

// levelOn is the index of the first variant of c (in placement order) that target t meets, or -1:
// a moved pod may go only where a variant as preferred is met.
func (d *dissolver) levelOn(c *class, t *target) int {
	s := d.s
	ignore := s.opts.IgnorePreferences
	for i := c.firstVariant(ignore); i < c.variantCount(); i = c.nextVariant(i, ignore) {
		if d.meets(s.variant(c, i), t) {
			return i
		}
	}
	return -1
}

// meets reports whether claim t satisfies the variant's requirements and taints as it is (moves
// do not narrow claims, so the answer stands for the whole dissolving).
func (d *dissolver) meets(v *variant, t *target) bool {
	if v.reqs.Len() == 0 {
		return d.meetsNow(v, t)
	}
	k := meetsKey{v, t.id}
	ok, known := d.meetsCache[k]
	if !known {
		ok = d.meetsNow(v, t)
		d.meetsCache[k] = ok
	}
	return ok
}

func (d *dissolver) meetsNow(v *variant, t *target) bool {
	s := d.s
	if v.reqs.Empty() {
		return false
	}
	if f := s.fit(v, t.pool); f.reason != "" {
		return false
	}
	if v.reqs.Len() == 0 {
		return true
	}
	if t.reqs.Compatible(v.reqs, s.undefinedOK) != nil {
		return false
	}
	merged := t.reqs.Clone()
	merged.AddAll(v.reqs)
	return len(narrowedKeys(t.reqs, merged, v.reqs.Keys())) == 0
}

// cost is what moving one pod of class c from claim from to claim r adds to r's price, with the
// variant that allows it; ok is false when the move is not allowed.
func (d *dissolver) cost(c *class, level int, from, r *target) (float64, *variant, bool) {
	s := d.s
	need := d.need(r, c.req)
	if !need.lessEq(r.fullAlloc) {
		return 0, nil, false
	}
	// The counts of the groups the pod is counted in: zone counts stay as they are, hostname
	// anti-affinity of pods there excludes it, and so does a hostname spread there (a pod's placed
	// before, or one moving in) that it would take past its maxSkew.
	for _, gi := range c.matches {
		g := s.groups[gi]
		if !g.hostname {
			if !sameDomain(from, r, g.key) {
				return 0, nil, false
			}
			continue
		}
		k := [2]int{gi, r.openIdx}
		n := d.extraCount[k] + 1
		if g.nodeOwner(r.id) > 0 || overSkew(g, r.id, n) {
			return 0, nil, false
		}
		if e := d.extraSkew[k]; e > 0 && g.nodeCount(r.id)+n > e {
			return 0, nil, false
		}
	}
	// The pod's own spreads: the same zone, and room on the machine.
	for _, sc := range c.spreads {
		g := s.groups[sc.group]
		if !g.hostname {
			if _, ok := from.domain(g.key); !ok || !sameDomain(from, r, g.key) {
				return 0, nil, false
			}
			continue
		}
		if g.nodeCount(r.id)+d.extraCount[[2]int{sc.group, r.openIdx}]+b2i(sc.selfMatch) > sc.maxSkew {
			return 0, nil, false
		}
	}
	var v *variant
	ignore := s.opts.IgnorePreferences
	for i := c.firstVariant(ignore); i <= level; i = c.nextVariant(i, ignore) {
		if w := s.variant(c, i); d.meets(w, r) {
			v = w
			break
		}
	}
	if v == nil {
		return 0, nil, false
	}
	after := d.priceHolding(r, need)
	if math.IsInf(after, 1) {
		return 0, nil, false
	}
	return after - d.price(r), v, true
}

// sameDomain reports whether targets a and b have the same value of key, or neither has one.
func sameDomain(a, b *target, key string) bool {
	va, okA := a.domain(key)
	vb, okB := b.domain(key)
	return okA == okB && va == vb
}

// need is what claim r would hold with the planned moves and one more pod of request req.
func (d *dissolver) need(r *target, req vec) vec {
	need := d.s.scratch
	copy(need, r.used)
	if e, ok := d.extra[r.openIdx]; ok {
		need.add(e)
	}
	need.add(req)
	return need
}

// reserve records a planned move of a pod of class c to claim r.
func (d *dissolver) reserve(c *class, r *target) {
	e, ok := d.extra[r.openIdx]
	if !ok {
		e = make(vec, len(c.req))
		d.extra[r.openIdx] = e
	}
	e.add(c.req)
	for _, gi := range c.matches {
		if d.s.groups[gi].hostname {
			d.extraCount[[2]int{gi, r.openIdx}]++
		}
	}
	for _, sc := range c.spreads {
		if d.s.groups[sc.group].hostname {
			k := [2]int{sc.group, r.openIdx}
			if e := d.extraSkew[k]; e == 0 || sc.maxSkew < e {
				d.extraSkew[k] = sc.maxSkew
			}
		}
	}
}

// price is claim t's price now.
func (d *dissolver) price(t *target) float64 {
	rc := &d.recv[t.openIdx]
	if !rc.known {
		rc.price, rc.known = d.priceHolding(t, t.used), true
	}
	return rc.price
}

// priceHolding is the price of the cheapest of t's candidates that holds used, +Inf when none does.
func (d *dissolver) priceHolding(t *target, used vec) float64 {
	rc := &d.recv[t.openIdx]
	if !rc.ofKnown {
		rc.of, rc.mask, rc.ofKnown = offeringFilter(t.reqs), d.s.offerings.mask(t.reqs), true
	}
	return d.s.cheapestHolding(t, used, rc.mask, &rc.of)
}

// apply carries the moves out: t's pods stop counting where they were and join their new
// claims, and t is left empty (finish drops it).
func (d *dissolver) apply(t *target, moves []move) {
	s := d.s
	for _, p := range t.pods {
		c := d.classOf[p]
		for _, gi := range c.matches {
			g := s.groups[gi]
			dom, _ := t.domain(g.key)
			g.unrecord(t, dom)
		}
	}
	t.pods, t.used = nil, make(vec, len(t.used))
	if p := t.pool; p.capped() {
		p.release(t.reserved, make(vec, len(t.reserved)))
		clear(t.reserved)
	}
	d.gone[t.openIdx] = true
	t.closed = true
	s.rooms[t.openIdx].closed = true
	for _, m := range moves {
		r := m.to
		need := s.scratch
		copy(need, r.used)
		need.add(m.v.class.req)
		cands := s.filterCandidatesInto(s.candScratch[:0], r.candidates, need, r.reqs, nil)
		s.candScratch = cands
		own := r.candidates[:len(cands)]
		copy(own, cands)
		s.commit(m.v, r, m.pod, own, nil, false)
		d.recv[r.openIdx].known = false
	}
}

// unrecord takes back the count of a matching pod that leaves target t.
func (g *group) unrecord(t *target, domain string) {
	if g.hostname {
		if t.id < len(g.nodeCounts) && g.nodeCounts[t.id] > 0 {
			g.nodeCounts[t.id]--
			g.total--
		}
		return
	}
	if domain != "" && g.counts[domain] > 0 {
		g.counts[domain]--
		g.total--
	}
}
