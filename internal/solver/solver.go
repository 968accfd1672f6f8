package solver

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// DefaultMaxInstanceTypes bounds the candidate instance types of a planned NodeClaim.
const DefaultMaxInstanceTypes = 60

type solver struct {
	in   Input
	opts Options
	ri   *resourceIndex

	pools      []*pool
	classes    []*class
	groups     []*group
	groupIndex map[string]int
	// domains are the known values of each non-hostname topology key.
	domains map[string]domainSet

	targets []*target
	// open are the planned claims in creation order; closed ones stay, and are skipped. rooms
	// parallels it.
	open  []*target
	rooms []room
	// version counts placements; topology plans are valid for one version.
	version int
	// topoKeys are the non-hostname keys some topology group uses.
	topoKeys []string
	// scratch is reused for the resources a candidate must hold.
	scratch     vec
	candScratch []*itInfo
	offerings   *offeringIndex
	// preferNoScheduleTaints is set when some pool or node has a PreferNoSchedule taint.
	preferNoScheduleTaints bool
	// order is the classes in packing order; cursor the first with pods left.
	order  []*class
	cursor int
	// totalDemand is the summed requests of all pods.
	totalDemand vec
	// balance is how the packing order keeps claims balanced.
	balance balancing
	// failed are the pods of the current pass that fit nowhere, with their reasons.
	failed  []podItem
	reasons map[*corev1.Pod]string
	minReq  vec

	result Result
}

// balancing is how the packing order chooses between CPU-heavy and memory-heavy pods.
type balancing int

const (
	// balanceLast balances the claim being filled (the latest).
	balanceLast balancing = iota
	// balanceOpen balances the free room of all open claims' cheapest types.
	balanceOpen
)

// secondPackingClaims bounds the plans that get a second packing: when a plan buys few machines,
// each one's fill matters most and another pass is cheap; large plans keep the first.
const secondPackingClaims = 64

// Solve plans where in.Pods go. It is deterministic: the same input gives the same plan.
//
// It packs balancing CPU against memory on the claim being filled; when that plan buys few
// machines it packs again balancing the room of all open claims — each way wins on some
// workloads — and returns the plan that leaves fewer pods unplaced, then costs less, then buys
// fewer machines, then the first.
func Solve(in Input, opts Options) *Result {
	if opts.MaxInstanceTypes <= 0 {
		opts.MaxInstanceTypes = DefaultMaxInstanceTypes
	}
	best := solve(in, opts, balanceLast)
	if len(best.NodeClaims) <= secondPackingClaims {
		if r := solve(in, opts, balanceOpen); better(r, best) {
			best = r
		}
	}
	return best
}

func better(a, b *Result) bool {
	if len(a.Unschedulable) != len(b.Unschedulable) {
		return len(a.Unschedulable) < len(b.Unschedulable)
	}
	if pa, pb := a.Price(), b.Price(); pa != pb {
		return pa < pb-1e-9
	}
	return len(a.NodeClaims) < len(b.NodeClaims)
}

func solve(in Input, opts Options, b balancing) *Result {
	s := &solver{in: in, opts: opts, ri: newResourceIndex(), groupIndex: map[string]int{}, domains: map[string]domainSet{}, balance: b}
	s.prepare()
	s.run()
	s.finish()
	return &s.result
}

type podItem struct {
	pod   *corev1.Pod
	class *class
}

func (s *solver) prepare() {
	reqs := make([]corev1.ResourceList, len(s.in.Pods))
	for i, p := range s.in.Pods {
		reqs[i] = podRequests(p)
		s.ri.register(reqs[i])
	}
	for _, ds := range s.in.DaemonSetPods {
		s.ri.register(podRequests(ds))
	}
	for i := range s.in.NodePools {
		for _, it := range s.in.NodePools[i].InstanceTypes {
			s.ri.register(it.Capacity)
		}
		s.ri.register(s.in.NodePools[i].Remaining)
	}
	for i := range s.in.Nodes {
		s.ri.register(s.in.Nodes[i].Allocatable)
	}

	hasPNS := func(ts []corev1.Taint) bool {
		return slices.ContainsFunc(ts, func(t corev1.Taint) bool { return t.Effect == corev1.TaintEffectPreferNoSchedule })
	}
	for i := range s.in.NodePools {
		s.preferNoScheduleTaints = s.preferNoScheduleTaints || hasPNS(s.in.NodePools[i].Taints)
	}
	for i := range s.in.Nodes {
		s.preferNoScheduleTaints = s.preferNoScheduleTaints || hasPNS(s.in.Nodes[i].Taints)
	}

	// Classes.
	bySig := map[string]*class{}
	for i, p := range s.in.Pods {
		sig := podSignature(p, reqs[i])
		c, ok := bySig[sig]
		if !ok {
			c = s.buildClass(len(s.classes), p, reqs[i])
			bySig[sig] = c
			s.classes = append(s.classes, c)
		}
		c.pods = append(c.pods, p)
	}
	// Existing pods' required anti-affinity terms make groups too (their symmetry binds new pods).
	type owned struct {
		node   int
		groups []int
	}
	var owners []owned
	for ni := range s.in.Nodes {
		for _, p := range s.in.Nodes[ni].Pods {
			if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
				var gs []int
				for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					if pt, err := s.podTerm(p, t, "pod anti-affinity"); err == nil {
						gs = append(gs, pt.group)
					}
				}
				owners = append(owners, owned{node: ni, groups: gs})
			}
		}
	}

	// Pools, highest weight first.
	s.offerings = newOfferingIndex(s.in.NodePools)
	for i := range s.in.NodePools {
		s.pools = append(s.pools, s.newPool(&s.in.NodePools[i], i))
	}
	sort.SliceStable(s.pools, func(i, j int) bool {
		a, b := s.pools[i].np, s.pools[j].np
		if a.Weight != b.Weight {
			return a.Weight > b.Weight
		}
		return a.Name < b.Name
	})
	for _, g := range s.groups {
		if !g.hostname {
			s.domainsOf(g.key)
			if !slices.Contains(s.topoKeys, g.key) {
				s.topoKeys = append(s.topoKeys, g.key)
			}
		}
	}
	slices.Sort(s.topoKeys)
	s.scratch = make(vec, s.ri.len())

	// Existing nodes, with their pods counted.
	for ni := range s.in.Nodes {
		n := &s.in.Nodes[ni]
		t := &target{id: len(s.targets), existing: n, labels: n.Labels, alloc: s.ri.vec(n.Allocatable), used: make(vec, s.ri.len())}
		s.targets = append(s.targets, t)
		for _, p := range n.Pods {
			t.used.add(s.ri.vec(podRequests(p)))
			t.ports = append(t.ports, podHostPorts(p)...)
			for _, g := range s.groups {
				if g.matches(p.Namespace, p.Labels, s.in.NamespaceLabels) {
					d, _ := t.domain(g.key)
					g.record(t, d, true, false)
				}
			}
		}
	}
	for _, o := range owners {
		t := s.targets[o.node]
		for _, gi := range o.groups {
			g := s.groups[gi]
			d, _ := t.domain(g.key)
			g.record(t, d, false, true)
		}
	}

	for _, c := range s.classes {
		for gi, g := range s.groups {
			if g.matches(c.ns, c.labels, s.in.NamespaceLabels) {
				c.matches = append(c.matches, gi)
			}
		}
	}
	for _, p := range s.pools {
		s.priceCapacity(p)
	}
	s.minReq = nil
	for _, c := range s.classes {
		if s.minReq == nil {
			s.minReq = c.req.clone()
			continue
		}
		for i := range s.minReq {
			s.minReq[i] = min(s.minReq[i], c.req[i])
		}
	}
}

// domainsOf returns the values a topology key can take: from the pools' requirements and
// instance types, and from existing nodes.
func (s *solver) domainsOf(key string) domainSet {
	if d, ok := s.domains[key]; ok {
		return d
	}
	seen := map[string]bool{}
	for _, p := range s.pools {
		for _, v := range s.poolDomains(key, p) {
			seen[v] = true
		}
	}
	for i := range s.in.Nodes {
		if v, ok := s.in.Nodes[i].Labels[key]; ok {
			seen[v] = true
		}
	}
	d := sortedSet(seen)
	s.domains[key] = d
	return d
}

// poolDomains returns the values of key the pool's machines can have.
func (s *solver) poolDomains(key string, p *pool) domainSet {
	ck := key + "\x00" + p.np.Name
	if d, ok := s.domains[ck]; ok {
		return d
	}
	seen := map[string]bool{}
	r, constrained := p.reqs.Get(key)
	if constrained && r.IsFinite() {
		for _, v := range r.Values() {
			seen[v] = true
		}
	} else {
		for _, info := range p.types {
			tr, ok := info.it.Requirements.Get(key)
			if !ok || !tr.IsFinite() {
				continue
			}
			for _, v := range tr.Values() {
				if !constrained || r.Allows(v) {
					seen[v] = true
				}
			}
		}
	}
	d := sortedSet(seen)
	s.domains[ck] = d
	return d
}

// toleratedDomains returns the values of key on machines whose taints the tolerations tolerate:
// the eligible domains of a spread with nodeTaintsPolicy Honor.
func (s *solver) toleratedDomains(key string, tolerations []corev1.Toleration) domainSet {
	seen := map[string]bool{}
	for _, p := range s.pools {
		if _, bad := untoleratedTaint(tolerations, p.np.Taints, false); bad {
			continue
		}
		for _, v := range s.poolDomains(key, p) {
			seen[v] = true
		}
	}
	for i := range s.in.Nodes {
		n := &s.in.Nodes[i]
		if _, bad := untoleratedTaint(tolerations, n.Taints, false); bad {
			continue
		}
		if v, ok := n.Labels[key]; ok {
			seen[v] = true
		}
	}
	return sortedSet(seen)
}

func sortedSet(seen map[string]bool) domainSet {
	d := make(domainSet, 0, len(seen))
	for v := range seen {
		d = append(d, v)
	}
	slices.Sort(d)
	return d
}

func (s *solver) run() {
	order := slices.Clone(s.classes)
	s.order = order
	sort.SliceStable(order, func(i, j int) bool {
		a, b := order[i].req, order[j].req
		if a[rCPU] != b[rCPU] {
			return a[rCPU] > b[rCPU]
		}
		if a[rMemory] != b[rMemory] {
			return a[rMemory] > b[rMemory]
		}
		return order[i].id < order[j].id
	})
	var total vec
	for _, c := range order {
		c.left = len(c.pods)
		if total == nil {
			total = make(vec, len(c.req))
		}
		for range c.pods {
			total.add(c.req)
		}
	}
	// Two queues in packing order: pods heavier in CPU than in memory relative to the whole
	// demand, and the others. Drawing from the one the filling claim lacks keeps claims balanced
	// instead of CPU-full and memory-empty (or the reverse).
	s.totalDemand = total
	var cpuHeavy, memHeavy []podItem
	for _, c := range order {
		heavy := total == nil || total[rMemory] == 0 ||
			float64(c.req[rCPU])/float64(max(total[rCPU], 1)) >= float64(c.req[rMemory])/float64(total[rMemory])
		for _, p := range c.pods {
			if heavy {
				cpuHeavy = append(cpuHeavy, podItem{pod: p, class: c})
			} else {
				memHeavy = append(memHeavy, podItem{pod: p, class: c})
			}
		}
	}
	items := make([]podItem, 0, len(s.in.Pods))
	for len(cpuHeavy)+len(memHeavy) > 0 {
		var it podItem
		if s.wantsMemory(cpuHeavy, memHeavy) {
			it, memHeavy = memHeavy[0], memHeavy[1:]
		} else {
			it, cpuHeavy = cpuHeavy[0], cpuHeavy[1:]
		}
		items = append(items, it)
		s.placeCounted(it, &items)
	}
	// Pods that fail may fit once others are placed (pod affinity to a pod later in the order),
	// so failures are retried until a pass places nothing new.
	failed := s.failed
	for len(failed) > 0 {
		s.failed = nil
		s.cursor = 0
		for _, it := range failed {
			it.class.left++
		}
		for _, it := range failed {
			s.placeCounted(it, nil)
		}
		if len(s.failed) == len(failed) {
			for _, it := range s.failed {
				s.result.Unschedulable = append(s.result.Unschedulable, PodError{Pod: it.pod, Reason: s.reasons[it.pod]})
			}
			return
		}
		failed = s.failed
	}
}

// wantsMemory says whether the next pod should come from the memory-heavy queue: when the claim
// being filled is fuller in CPU than in memory, or the CPU-heavy queue is empty.
func (s *solver) wantsMemory(cpuHeavy, memHeavy []podItem) bool {
	switch {
	case len(memHeavy) == 0:
		return false
	case len(cpuHeavy) == 0:
		return true
	case len(s.open) == 0:
		return false
	}
	if s.balance == balanceOpen {
		// Draw the shape the open claims' cheapest types have more room for.
		var freeCPU, freeMem float64
		for i := range s.rooms {
			if r := &s.rooms[i]; !r.closed {
				freeCPU += float64(r.cheap[0])
				freeMem += float64(r.cheap[1])
			}
		}
		if freeCPU > 0 || freeMem > 0 {
			return freeMem/float64(max(s.totalDemand[rMemory], 1)) > freeCPU/float64(max(s.totalDemand[rCPU], 1))
		}
	}
	// Balance the claim being filled.
	t := s.open[len(s.open)-1]
	if t.closed || t.alloc[rCPU] == 0 || t.alloc[rMemory] == 0 {
		return false
	}
	return float64(t.used[rCPU])/float64(t.alloc[rCPU]) > float64(t.used[rMemory])/float64(t.alloc[rMemory])
}

// placeCounted places a pod, remembering failures, and keeps the class counts and the packing
// cursor current.
func (s *solver) placeCounted(it podItem, _ *[]podItem) {
	if reason := s.place(it); reason != "" {
		s.failed = append(s.failed, it)
		if s.reasons == nil {
			s.reasons = map[*corev1.Pod]string{}
		}
		s.reasons[it.pod] = reason
	}
	it.class.left--
	for s.cursor < len(s.order) && s.order[s.cursor].left <= 0 {
		s.cursor++
	}
}

// place puts one pod somewhere, relaxing preferences as needed, or returns why it fits nowhere.
func (s *solver) place(it podItem) string {
	c := it.class
	if c.err != nil {
		return c.err.Error()
	}
	ignore := s.opts.IgnorePreferences
	var reason string
	for i := c.firstVariant(ignore); i < c.variantCount(); i = c.nextVariant(i, ignore) {
		v := s.variant(c, i)
		if v.reqs.Empty() {
			reason = "requirements cannot be satisfied: " + v.reqs.String()
			continue
		}
		for _, t := range s.targets {
			if t.isClaim() {
				break
			}
			if s.tryExisting(v, t, it.pod) {
				return ""
			}
		}
		if s.tryOpenClaims(v, it.pod) {
			return ""
		}
		var why []string
		for _, p := range s.pools {
			r := s.tryNew(v, p, it.pod)
			if r == "" {
				return ""
			}
			why = append(why, fmt.Sprintf("NodePool %s: %s", p.np.Name, r))
		}
		switch {
		case len(s.pools) == 0:
			reason = "no NodePool"
		default:
			reason = strings.Join(why, "; ")
		}
		if rel := v.describeRelaxed(); rel != "" {
			reason += " (" + rel + ")"
		}
	}
	return reason
}

func (s *solver) tryExisting(v *variant, t *target, pod *corev1.Pod) bool {
	if t.existing.Unschedulable || !t.used.fitsWith(v.class.req, t.alloc) {
		return false
	}
	if _, bad := untoleratedTaint(v.class.tolerations, t.existing.Taints, v.avoidPreferNoS); bad {
		return false
	}
	if _, ok := v.reqs.Satisfied(t.labels); !ok {
		return false
	}
	if !t.portsFree(v.class.hostPorts) {
		return false
	}
	if _, err := s.topology(v, t); err != nil {
		return false
	}
	s.commit(v, t, pod, nil, nil, false)
	s.result.Bindings = append(s.result.Bindings, Binding{Pod: pod, Node: t.existing.Name})
	return true
}

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
		if err := t.reqs.Compatible(v.reqs, undefinedOK); err != nil {
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
	cands := s.filterCandidatesInto(s.candScratch[:0], t.candidates, need, reqs, changed)
	s.candScratch = cands
	if len(cands) == 0 {
		if len(narrow) == 0 {
			return never
		}
		return notNow
	}
	if r := minValuesShortfall(cands, reqs); r != "" {
		return notNow
	}
	// The survivors are a subsequence of the claim's candidates: keep them in its own array.
	own := t.candidates[:len(cands)]
	copy(own, cands)
	s.commit(v, t, pod, own, &reqs, changed != nil)
	return joined
}

// tryNew plans a new claim from pool p for the pod, or says why it cannot.
func (s *solver) tryNew(v *variant, p *pool, pod *corev1.Pod) string {
	f := s.fit(v, p)
	if f.reason != "" {
		return f.reason
	}
	need := p.daemon.clone()
	need.add(v.class.req)
	var cands []*itInfo
	fitsResources := false
	for _, info := range f.types {
		if !need.lessEq(info.alloc) {
			continue
		}
		fitsResources = true
		if p.remaining != nil && !withinLimits(info.capacity, p.remaining, p.limited) {
			continue
		}
		cands = append(cands, info)
	}
	if !fitsResources {
		return s.tooBig(need, p, f)
	}
	if len(cands) == 0 {
		return s.limitsExhausted(p)
	}
	t := &target{id: len(s.targets), pool: p, reqs: f.reqs, used: p.daemon.clone(), alloc: make(vec, s.ri.len())}
	narrow, err := s.topology(v, &target{id: t.id, pool: p, reqs: f.reqs, candidates: cands})
	if err != nil {
		return err.Error()
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
		cands = s.filterCandidates(cands, need, reqs, keys)
		if len(cands) == 0 {
			return "no instance type offers the zone the topology constraints need"
		}
	}
	if r := minValuesShortfall(cands, reqs); r != "" {
		return r
	}
	if !changed {
		reqs = reqs.Clone()
	}
	t.reqs = reqs
	t.reserved = make(vec, s.ri.len())
	if target := s.chooseTarget(p, cands, v.class); target != nil {
		t.cap = target.alloc
	}
	s.targets = append(s.targets, t)
	t.openIdx = len(s.open)
	s.open = append(s.open, t)
	s.rooms = append(s.rooms, room{})
	s.commit(v, t, pod, cands, nil, false)
	return ""
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
	var short []string
	for i := range need {
		if need[i] > largest[i] {
			short = append(short, s.ri.describe(oneDim(i, need[i], len(need))))
		}
	}
	msg := fmt.Sprintf("no instance type has %s", strings.Join(short, ", "))
	if p.daemon[rCPU] > 0 || p.daemon[rMemory] > 0 {
		msg += " after daemonset overhead"
	}
	return msg
}

func oneDim(i int, x int64, n int) vec {
	v := make(vec, n)
	v[i] = x
	return v
}

func (s *solver) limitsExhausted(p *pool) string {
	var parts []string
	for i, lim := range p.limited {
		if lim {
			q := s.ri.list(oneDim(i, max(p.remaining[i], 0), len(p.remaining)))[s.ri.names[i]]
			parts = append(parts, fmt.Sprintf("%s %s", s.ri.names[i], q.String()))
		}
	}
	return "limits exhausted: " + strings.Join(parts, ", ") + " left, too little for any instance type"
}

// filterCandidates keeps the candidates that can hold need and satisfy reqs on the changed keys
// (the others were checked when the candidates were chosen).
func (s *solver) filterCandidates(cands []*itInfo, need vec, reqs requirements.Requirements, changed []string) []*itInfo {
	return s.filterCandidatesInto(make([]*itInfo, 0, len(cands)), cands, need, reqs, changed)
}

// filterCandidatesInto is filterCandidates appending to out.
func (s *solver) filterCandidatesInto(out, cands []*itInfo, need vec, reqs requirements.Requirements, changed []string) []*itInfo {
	offerings := false
	for _, k := range changed {
		if k == karpv1.ZoneLabelKey || k == karpv1.CapacityTypeLabelKey {
			offerings = true
		}
	}
	var of offeringReqs
	var mask uint64
	if offerings {
		of = offeringFilter(reqs)
		mask = s.offerings.mask(reqs)
	}
	keyReqs := make([]requirements.Requirement, len(changed))
	for i, k := range changed {
		keyReqs[i], _ = reqs.Get(k)
	}
	for _, info := range cands {
		if !need.lessEq(info.alloc) {
			continue
		}
		if len(changed) > 0 && !typeAllowsKeys(info, keyReqs) {
			continue
		}
		if offerings && !s.offerings.offers(info, mask, &of) {
			continue
		}
		out = append(out, info)
	}
	return out
}

func typeAllowsKeys(info *itInfo, keyReqs []requirements.Requirement) bool {
	for i := range keyReqs {
		tr, ok := info.it.Requirements.Get(keyReqs[i].Key)
		if !ok {
			continue
		}
		if !tr.Intersects(&keyReqs[i]) {
			return false
		}
	}
	return true
}

// minValuesShortfall says which minValues the candidates fail, or "".
func minValuesShortfall(cands []*itInfo, reqs requirements.Requirements) string {
	var msg string
	reqs.Each(func(r requirements.Requirement) {
		if r.MinValues == 0 || msg != "" {
			return
		}
		seen := map[string]bool{}
		for _, info := range cands {
			if v, ok := info.labels[r.Key]; ok && r.Allows(v) {
				seen[v] = true
			}
		}
		if len(seen) < r.MinValues {
			msg = fmt.Sprintf("minValues %d of %s not met: only %d value(s) among fitting instance types", r.MinValues, r.Key, len(seen))
		}
	})
	return msg
}

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
		if s.full(t) {
			t.closed = true
		}
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
}

// full reports whether no pod of the solve could fit in what the claim has left.
func (s *solver) full(t *target) bool {
	for _, i := range []int{rCPU, rMemory, rPods} {
		if s.minReq[i] > 0 && t.alloc[i]-t.used[i] < s.minReq[i] {
			return true
		}
	}
	return false
}

// finish turns planned claims into the result.
func (s *solver) finish() {
	for _, t := range s.targets {
		if !t.isClaim() {
			continue
		}
		s.result.NodeClaims = append(s.result.NodeClaims, s.plannedClaim(t))
	}
}

func (s *solver) plannedClaim(t *target) *PlannedNodeClaim {
	type priced struct {
		info  *itInfo
		price float64
	}
	ps := make([]priced, 0, len(t.candidates))
	of := offeringFilter(t.reqs)
	mask := s.offerings.mask(t.reqs)
	for _, info := range t.candidates {
		price, ok := s.offerings.price(info, mask, &of)
		if ok {
			ps = append(ps, priced{info, price})
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
		if minValuesShortfall(infos, t.reqs) == "" {
			break
		}
		keep++
		chosen = ps[:keep]
	}
	nc := &PlannedNodeClaim{NodePool: t.pool.np.Name, Requests: s.ri.list(t.used), Pods: t.pods, Requirements: t.reqs.Clone()}
	names := make([]string, 0, len(chosen))
	final := make([]*itInfo, 0, len(chosen))
	for _, p := range chosen {
		nc.InstanceTypes = append(nc.InstanceTypes, p.info.it)
		names = append(names, p.info.it.Name)
		final = append(final, p.info)
	}
	if len(chosen) > 0 {
		nc.Price = chosen[0].price
	}
	nc.Requirements.Add(requirements.MustNew(karpv1.InstanceTypeLabelKey, requirements.In, names...))
	t.setCandidates(final)
	return nc
}
