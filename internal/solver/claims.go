package solver

import (
	"fmt"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/spend"
)

// room is a planned claim's free capacity in CPU, memory and pods, kept in one dense slice
// parallel to open so that scanning thousands of claims per pod stays in cache.
type room struct {
	// free is the room left before the claim's capacity bound; cheap before its cheapest type's.
	free, cheap [3]int64
	closed      bool
}

func (r *room) fits(req vec, cheapest bool) bool {
	lim := &r.free
	if cheapest {
		lim = &r.cheap
	}
	return req[rCPU] <= lim[0] && req[rMemory] <= lim[1] && req[rPods] <= lim[2]
}

func (s *solver) updateRoom(t *target) {
	r := &s.rooms[t.openIdx]
	r.closed = t.closed
	for i, d := range [3]int{rCPU, rMemory, rPods} {
		r.free[i] = t.alloc[d] - t.used[d]
		r.cheap[i] = t.candidates[0].alloc[d] - t.used[d]
	}
}

// tryOpenClaims adds the pod to a planned claim: first to one where it fits in the claim's
// cheapest instance type (it costs nothing more); else to the claim whose free room the pod's
// shape fills best (a CPU-heavy pod to a claim with spare CPU), among the first few that can
// hold it; else to any that can.
func (s *solver) tryOpenClaims(v *variant, pod *corev1.Pod) bool {
	// Claims only fill up, so those this variant can never join are skipped for good.
	for v.cursor < len(s.open) && (s.rooms[v.cursor].closed || v.isDead(s.open[v.cursor].id)) {
		v.cursor++
	}
	req := v.class.req
	for i := v.cursor; i < len(s.open); i++ {
		if r := &s.rooms[i]; !r.closed && r.fits(req, true) && s.tryOpen(v, i, pod) {
			return true
		}
	}
	const shortlist = 32
	type scored struct {
		i     int
		score float64
	}
	var best []scored
	for i := v.cursor; i < len(s.open) && len(best) < shortlist; i++ {
		r := &s.rooms[i]
		if r.closed || !r.fits(req, false) || v.isDead(s.open[i].id) {
			continue
		}
		t := s.open[i]
		score := 0.0
		for k, d := range [3]int{rCPU, rMemory, rPods} {
			if t.alloc[d] > 0 {
				score += float64(req[d]) * float64(r.free[k]) / (float64(t.alloc[d]) * float64(t.alloc[d]))
			}
		}
		best = append(best, scored{i, score})
	}
	slices.SortStableFunc(best, func(a, b scored) int { return cmpFloat(b.score, a.score) })
	for _, b := range best {
		if s.tryOpen(v, b.i, pod) {
			return true
		}
	}
	for i := v.cursor; i < len(s.open); i++ {
		if r := &s.rooms[i]; !r.closed && r.fits(req, false) && s.tryOpen(v, i, pod) {
			return true
		}
	}
	return s.tryColocate(v, pod)
}

// tryColocate places a pod that must share a machine with other pods (required pod affinity on
// the hostname) on a claim beyond the size it was being filled to: a new claim could never hold
// it, so the claim grows to a larger candidate type instead.
func (s *solver) tryColocate(v *variant, pod *corev1.Pod) bool {
	hostname := false
	for _, a := range v.affinity {
		hostname = hostname || s.groups[a.group].hostname
	}
	if !hostname {
		return false
	}
	for _, t := range s.open {
		if v.isDead(t.id) || !t.used.fitsWith(v.class.req, t.fullAlloc) {
			continue
		}
		if f := s.fit(v, t.pool); f.reason != "" {
			continue
		}
		if s.tryClaim(v, t, pod) == joined {
			return true
		}
	}
	return false
}

// tryOpen tries the open claim at index i, marking it dead for the variant when it never fits.
func (s *solver) tryOpen(v *variant, i int, pod *corev1.Pod) bool {
	t := s.open[i]
	if v.isDead(t.id) {
		return false
	}
	if !t.used.fitsWith(v.class.req, t.alloc) {
		v.markDead(t.id)
		return false
	}
	if f := s.fit(v, t.pool); f.reason != "" {
		v.markDead(t.id)
		return false
	}
	switch s.tryClaim(v, t, pod) {
	case joined:
		return true
	case never:
		v.markDead(t.id)
	}
	return false
}

// joinResult is the outcome of trying to add a pod to a planned claim.
type joinResult int

const (
	joined joinResult = iota
	// notNow may change as other pods are placed (zone topology, hostname pod affinity).
	notNow
	// never cannot change: claims only fill up and narrow.
	never
)

// tryClaim adds the pod to a planned claim if it fits.
func (s *solver) tryClaim(v *variant, t *target, pod *corev1.Pod) joinResult {
	if !t.portsFree(v.class.hostPorts) {
		return never
	}
	if s.hostnameBlocked(v, t.id) {
		return never
	}
	reqs := t.reqs
	var changed []string
	view := t
	if v.reqs.Len() > 0 {
		if err := t.reqs.Compatible(v.reqs, s.undefinedOK); err != nil {
			return never
		}
		reqs = t.reqs.Clone()
		reqs.AddAll(v.reqs)
		changed = v.reqs.Keys()
		view = &target{id: t.id, pool: t.pool, reqs: reqs, candidates: t.candidates}
	}
	narrow, err := s.topology(v, view)
	if err != nil {
		return notNow
	}
	if len(narrow) > 0 {
		if changed == nil {
			reqs = reqs.Clone()
		}
		for _, n := range narrow {
			reqs.Add(requirements.Single(n.key, n.value))
			changed = append(changed, n.key)
		}
	}
	need := s.scratch
	copy(need, t.used)
	need.add(v.class.req)
	narrowed := narrowedKeys(t.reqs, reqs, changed)
	if len(narrowed) == 0 && len(v.class.hostPorts) == 0 && need.lessEq(t.minAlloc) {
		// Every candidate still holds the claim and the pod narrowed nothing: the candidates,
		// and so their minValues, are what they were.
		s.commit(v, t, pod, t.candidates, &reqs, changed != nil)
		return joined
	}
	cands := s.filterCandidatesInto(s.candScratch[:0], t.candidates, need, reqs, narrowed)
	if len(v.class.hostPorts) > 0 {
		// The pod's host ports must not clash with those of the DaemonSets a candidate runs.
		kept := cands[:0]
		for _, info := range cands {
			if portsFreeOf(v.class.hostPorts, info.daemonPorts) {
				kept = append(kept, info)
			}
		}
		cands = kept
	}
	s.candScratch = cands
	if len(cands) == 0 {
		if len(narrow) == 0 {
			return never
		}
		return notNow
	}
	if r := s.minValuesShortfall(cands, reqs); r != "" {
		return notNow
	}
	// The survivors are a subsequence of the claim's candidates: keep them in its own array.
	own := t.candidates[:len(cands)]
	copy(own, cands)
	s.commit(v, t, pod, own, &reqs, changed != nil)
	return joined
}

// narrowedKeys are the keys of changed on which after differs from before: only those can rule a
// candidate out.
func narrowedKeys(before, after requirements.Requirements, changed []string) []string {
	var out []string
	for i, k := range changed {
		if b, ok := before.Get(k); ok {
			if a, _ := after.Get(k); b.Equal(&a) {
				if out == nil {
					out = append(make([]string, 0, len(changed)), changed[:i]...)
				}
				continue
			}
		}
		if out != nil {
			out = append(out, k)
		}
	}
	if out == nil {
		return changed
	}
	return out
}

// tryNew plans a new claim from pool p for the pod, or says why it cannot and at which check.
func (s *solver) tryNew(v *variant, p *pool, pod *corev1.Pod) (string, MissStage) {
	f := s.fit(v, p)
	if f.reason != "" {
		return f.reason, f.stage
	}
	need := v.class.req
	cands := make([]*itInfo, 0, len(f.types))
	fitsResources, portsClash := false, false
	for _, info := range f.types {
		if !need.lessEq(info.alloc) {
			continue
		}
		if !portsFreeOf(v.class.hostPorts, info.daemonPorts) {
			portsClash = true
			continue
		}
		fitsResources = true
		if !p.fitsLimits(info.capacity) {
			continue
		}
		cands = append(cands, info)
	}
	if !fitsResources {
		if portsClash {
			return "a DaemonSet holds the pod's host port on every instance type that fits it", MissResources
		}
		return s.tooBig(need, p, f), MissResources
	}
	if len(cands) == 0 {
		return s.limitsExhausted(p), MissLimits
	}
	t := &target{id: len(s.targets), pool: p, reqs: f.reqs, used: make(vec, s.ri.len()), alloc: make(vec, s.ri.len())}
	narrow, err := s.topology(v, &target{id: t.id, pool: p, reqs: f.reqs, candidates: cands})
	if err != nil {
		return err.Error(), MissPlacement
	}
	reqs := f.reqs
	changed := false
	if len(narrow) > 0 {
		reqs = reqs.Clone()
		keys := make([]string, 0, len(narrow))
		for _, n := range narrow {
			reqs.Add(requirements.Single(n.key, n.value))
			keys = append(keys, n.key)
		}
		changed = true
		// cands is this claim's own: filter it in place.
		cands = s.filterCandidatesInto(cands[:0], cands, need, reqs, keys)
		if len(cands) == 0 {
			return "no instance type offers the zone the topology constraints need", MissPlacement
		}
	}
	if r := s.minValuesShortfall(cands, reqs); r != "" {
		return r, MissPlacement
	}
	if !changed {
		reqs = reqs.Clone()
	}
	t.reqs = reqs
	t.reserved = make(vec, s.ri.len())
	target := s.chooseTarget(p, cands, v.class)
	if target != nil {
		t.cap = target.alloc
	}
	if s.limitsTight {
		// Pods already failed for the limits: a new claim reserves what its pod needs.
		target = nil
	}
	cands = reservable(p, cands, target, t.reqs)
	s.targets = append(s.targets, t)
	t.openIdx = len(s.open)
	s.open = append(s.open, t)
	s.rooms = append(s.rooms, room{})
	s.commit(v, t, pod, cands, nil, false)
	return "", 0
}

func withinLimits(capacity, remaining vec, limited []bool) bool {
	for i, lim := range limited {
		if lim && capacity[i] > remaining[i] {
			return false
		}
	}
	return true
}

func (s *solver) tooBig(need vec, p *pool, f *poolFit) string {
	largest := make(vec, s.ri.len())
	for _, info := range f.types {
		largest.maxInto(info.alloc)
	}
	var short, most []string
	for i := range need {
		if need[i] > largest[i] {
			short = append(short, s.ri.describe(oneDim(i, need[i], len(need))))
			if largest[i] > 0 {
				most = append(most, s.ri.describe(oneDim(i, largest[i], len(need))))
			} else {
				most = append(most, fmt.Sprintf("no %s", s.ri.names[i]))
			}
		}
	}
	overhead := ""
	if p.daemon[rCPU] > 0 || p.daemon[rMemory] > 0 {
		overhead = " after daemonset overhead"
	}
	if len(short) == 0 {
		// Each resource fits some type, but no type holds them all at once.
		return fmt.Sprintf("no instance type has %s at once%s", s.ri.describe(need), overhead)
	}
	return fmt.Sprintf("no instance type has %s%s (the largest has %s)", strings.Join(short, ", "), overhead, strings.Join(most, ", "))
}

func oneDim(i int, x int64, n int) vec {
	v := make(vec, n)
	v[i] = x
	return v
}

func (s *solver) limitsExhausted(p *pool) string {
	var parts []string
	for i, lim := range p.limited {
		switch {
		case !lim:
		case s.ri.names[i] == spend.LimitKey:
			parts = append(parts, fmt.Sprintf("spending limit (%s) $%.3f/h left", spend.LimitKey, float64(max(p.remaining[i], 0))/1000))
		default:
			q := s.ri.list(oneDim(i, max(p.remaining[i], 0), len(p.remaining)))[s.ri.names[i]]
			parts = append(parts, fmt.Sprintf("%s %s left", s.ri.names[i], q.String()))
		}
	}
	if c := p.cluster; c != nil {
		parts = append(parts, fmt.Sprintf("the cluster's spending limit (--spending-limit) $%.3f/h left", float64(max(c.left, 0))/1000))
	}
	// Each figure says "left": "cpu 990" alone reads as the CPU used up.
	return "limits exhausted: " + strings.Join(parts, ", ") + ", too little for any instance type"
}

// limitedPriceSpread is how much dearer than a claim's target type (or its cheapest candidate) a
// candidate of a pool with limits may be. The cloud launches the cheapest offering it can, so a
// type far dearer is launched only when every cheaper one is unavailable; keeping such types off
// the claim lets it reserve, against the limits, what it will really launch — not the largest
// machine that could hold it — so hard limits do not throttle a burst.
var limitedPriceSpread = 0.5

// reservable narrows a new claim's candidates in a pool with limits to those priced within
// limitedPriceSpread of its target type (or its cheapest candidate, when dearer; of its cheapest
// candidate alone without a target), and those no larger than the largest of them (nearInPrice).
// Requirements with minValues keep every candidate.
func reservable(p *pool, cands []*itInfo, target *itInfo, reqs requirements.Requirements) []*itInfo {
	if !p.capped() || len(cands) == 0 || hasMinValues(reqs) {
		return cands
	}
	bound := math.Inf(1)
	for _, info := range cands {
		bound = min(bound, info.minPrice)
	}
	if target != nil {
		bound = max(bound, target.minPrice)
	}
	bound *= 1 + limitedPriceSpread
	return nearInPrice(cands, func(info *itInfo) bool { return info.minPrice <= bound }, nil)
}

// nearInPrice keeps the candidates near (in price) that hold the claim's pods (holds; nil: all
// do), and besides them every candidate that holds them and is no larger, in any dimension of
// capacity, than the largest near one — dollars included under a spending cap, where a
// machine's capacity in dollars is its dearest offering. Such a type, however dear, raises
// neither what the claim reserves against the limits (its candidates' largest capacity) nor
// what it may be filled to; it stays on the claim as a fallback the cloud launches only when
// every cheaper type is unavailable, as Karpenter lists every valid type.
func nearInPrice(cands []*itInfo, near, holds func(*itInfo) bool) []*itInfo {
	ok := func(info *itInfo) bool { return holds == nil || holds(info) }
	var most vec
	for _, info := range cands {
		switch {
		case !near(info) || !ok(info):
		case most == nil:
			most = info.capacity.clone()
		default:
			most.maxInto(info.capacity)
		}
	}
	out := cands[:0:0]
	for _, info := range cands {
		if ok(info) && (near(info) || most != nil && info.capacity.lessEq(most)) {
			out = append(out, info)
		}
	}
	return out
}
