package solver

import (
	"math"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/spend"
)

// DefaultMaxInstanceTypes bounds the candidate instance types of a planned NodeClaim.
const DefaultMaxInstanceTypes = 60

type solver struct {
	in   Input
	opts Options
	ri   *resourceIndex
	// facts are the pending pods' requests and signatures, shared by the packings of a Solve.
	facts *podFacts

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
	// priced is plannedClaim's scratch.
	priced    []priced
	offerings *offeringIndex
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
	reasons map[*corev1.Pod]podMiss
	minReq  vec
	// limitsTight is set once a pod failed for a pool's limits: from then on a new claim of a
	// pool with limits reserves what its first pod needs, not the type it was meant to grow to.
	limitsTight bool
	// oldestFirst places the pods in the order of Input.Pods instead of largest first (the
	// packing that serves the pods that waited longest when limits cannot hold them all).
	oldestFirst bool
	// cluster is what is left of the cluster's spending limit, shared by the packing's pools (each
	// packing its own copy); nil without one.
	cluster *clusterBudget

	// slab holds the packing's existing-node targets (see existingSlab).
	slab *existingSlab
	// nodes are the existing nodes as both packings start from them.
	nodes []nodePrep
	// attachDims are the resource dimensions of CSI drivers' volume attachments.
	attachDims []int
	// wellKnown are the provider's label keys (Input.WellKnownLabels).
	wellKnown map[string]bool

	// slots are the capacity reservations' machines left for finish's claims (reservations.go).
	slots map[string]int

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
	res := solveOnce(in, opts)
	if res.fellBack {
		res = replanReserved(in, opts, res)
	}
	if opts.FillLimits {
		if dense := fillLimits(in, opts, res); dense != nil {
			res = dense
		}
	}
	return res
}

// solveOnce is one Solve, without the re-plan that capacity reservations may need.
func solveOnce(in Input, opts Options) *Result {
	if opts.MaxInstanceTypes <= 0 {
		opts.MaxInstanceTypes = DefaultMaxInstanceTypes
	}
	wellKnown := wellKnownLabels(in)
	base := prepareShared(in, opts, wellKnown, podFactsOf(in))
	// A small batch usually buys few machines, so it will get the second packing: it runs
	// alongside the first, on another core, rather than after it. (The packings only read base.)
	var second *solver
	var wg sync.WaitGroup
	if len(in.Pods) > 1 && len(in.Pods) <= concurrentPackingPods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			second = base.pack(balanceOpen, false)
		}()
	}
	best := base.pack(balanceLast, false)
	wg.Wait()
	// With one class of pods there is one queue, and both ways pack alike.
	if best.claims() <= secondPackingClaims && len(best.classes) > 1 {
		if second == nil {
			second = base.pack(balanceOpen, false)
		}
		if better(second, best) {
			best = second
		}
	}
	// Limits that cannot hold every pod take the pods that waited longest first.
	if best.limitsTight && best.limitsPassedOver() {
		best.release()
		if second != nil {
			second.release()
		}
		best, second = base.pack(balanceLast, true), nil
	}
	// Only the winner's claims are priced, sorted and bounded.
	best.finish()
	res := &best.result
	res.slotsLeft = best.slots
	best.release()
	if second != nil {
		second.release()
	}
	return res
}

// limitsPassedOver reports whether a pod refused for a pool's limits came before a pod placed on
// a new claim of that pool in Input.Pods (the provisioner gives them oldest first).
func (s *solver) limitsPassedOver() bool {
	index := inputOrder(s.in.Pods)
	// last is, per pool, the latest pod placed on one of its new claims.
	last := map[string]int{}
	for _, t := range s.targets {
		if !t.isClaim() {
			continue
		}
		for _, p := range t.pods {
			if i, ok := index[p]; ok {
				if l, seen := last[t.pool.np.Name]; !seen || i > l {
					last[t.pool.np.Name] = i
				}
			}
		}
	}
	for _, e := range s.result.Unschedulable {
		for _, m := range e.Pools {
			if l, ok := last[m.NodePool]; ok && m.Stage == MissLimits && index[e.Pod] < l {
				return true
			}
		}
	}
	return false
}

// existingSlab is the memory of a packing's existing-node targets: a Solve of a cluster of
// hundreds of nodes, as the disruption core runs many per decision, would otherwise allocate
// them anew each time. Nothing of a packing outlives its Solve (the Result holds pods, node names
// and instance types), so Solve gives its packings' slabs back for the next.
type existingSlab struct {
	targets []target
	used    vec
}

var existingSlabs = sync.Pool{New: func() any { return new(existingSlab) }}

// take returns room for n targets and n vectors of w dimensions; the caller writes each whole.
func (sl *existingSlab) take(n, w int) ([]target, vec) {
	if cap(sl.targets) < n {
		sl.targets = make([]target, n)
	}
	if cap(sl.used) < n*w {
		sl.used = make(vec, n*w)
	}
	return sl.targets[:n], sl.used[:n*w]
}

// release gives the packing's slab back, emptied of what it pointed to.
func (s *solver) release() {
	if s.slab == nil {
		return
	}
	clear(s.slab.targets[:cap(s.slab.targets)])
	existingSlabs.Put(s.slab)
	s.slab, s.targets = nil, nil
}

// concurrentPackingPods bounds the batches whose second packing starts with the first.
const concurrentPackingPods = 512

func better(a, b *solver) bool {
	if ua, ub := len(a.result.Unschedulable), len(b.result.Unschedulable); ua != ub {
		return ua < ub
	}
	if pa, pb := a.planPrice(), b.planPrice(); pa != pb {
		return pa < pb-1e-9
	}
	return a.claims() < b.claims()
}

// podFacts are what both packings read of each pending pod, computed once per Solve: its
// requests (with its CSI attachments) and its class signature.
type podFacts struct {
	reqs []corev1.ResourceList
	sigs []string
}

func podFactsOf(in Input) *podFacts {
	s := &solver{in: in}
	f := &podFacts{reqs: make([]corev1.ResourceList, len(in.Pods)), sigs: make([]string, len(in.Pods))}
	for i, p := range in.Pods {
		f.reqs[i] = s.withAttachments(p, podRequests(p))
		f.sigs[i] = podSignature(p, f.reqs[i])
	}
	return f
}

// prepareShared builds what every packing of a Solve reads and none writes: the resource index,
// the offering index and the pools' instance types with their DaemonSet overhead, prices and
// efficiencies. The packings fork from it.
func prepareShared(in Input, opts Options, wellKnown map[string]bool, facts *podFacts) *solver {
	s := &solver{in: in, opts: opts, wellKnown: wellKnown, facts: facts}
	register := func(ri *resourceIndex, known func(corev1.ResourceList) bool, seenType func(*cloudprovider.InstanceType) bool) {
		s.ri = ri
		s.registerAttachments()
		for i := range in.Pods {
			ri.register(facts.reqs[i])
		}
		for _, ds := range in.DaemonSetPods {
			ri.register(podRequests(ds))
		}
		for i := range in.NodePools {
			for _, it := range in.NodePools[i].InstanceTypes {
				if !seenType(it) {
					ri.register(it.Capacity)
				}
			}
			ri.register(in.NodePools[i].Remaining)
		}
		if in.SpendingLeft != nil {
			ri.add(spend.LimitKey)
		}
		for i := range in.Nodes {
			if !known(in.Nodes[i].Allocatable) {
				ri.register(in.Nodes[i].Allocatable)
			}
		}
	}
	if opts.Cache != nil {
		s.ri = opts.Cache.index(register)
	} else {
		never := func(corev1.ResourceList) bool { return false }
		register(newResourceIndex(), never, func(*cloudprovider.InstanceType) bool { return false })
	}

	s.prepareNodes()

	hasPNS := func(ts []corev1.Taint) bool {
		return slices.ContainsFunc(ts, func(t corev1.Taint) bool { return t.Effect == corev1.TaintEffectPreferNoSchedule })
	}
	for i := range in.NodePools {
		s.preferNoScheduleTaints = s.preferNoScheduleTaints || hasPNS(in.NodePools[i].Taints)
	}
	for i := range in.Nodes {
		s.preferNoScheduleTaints = s.preferNoScheduleTaints || hasPNS(in.Nodes[i].Taints)
	}

	// Pools, highest weight first; pools whose launches do not register last.
	s.offerings = newOfferingIndex(&s.in, opts.Cache)
	if in.SpendingLeft != nil {
		s.cluster = &clusterBudget{dim: s.ri.pos[spend.LimitKey], left: int64(math.Floor(*in.SpendingLeft*1000 + 1e-9))}
	}
	for i := range in.NodePools {
		p := s.newPool(&in.NodePools[i], i)
		p.cluster = s.cluster
		s.pools = append(s.pools, p)
	}
	sort.SliceStable(s.pools, func(i, j int) bool {
		a, b := s.pools[i].np, s.pools[j].np
		if a.RegistrationUnhealthy != b.RegistrationUnhealthy {
			return b.RegistrationUnhealthy
		}
		if a.Weight != b.Weight {
			return a.Weight > b.Weight
		}
		return a.Name < b.Name
	})
	demand := make(vec, s.ri.len())
	for i := range in.Pods {
		demand.add(s.ri.vec(facts.reqs[i]))
	}
	for _, p := range s.pools {
		s.priceCapacity(p, demand)
	}
	return s
}

// pack forks a packing from the shared preparation, packs once and returns it; finish turns
// the plan into a Result.
func (base *solver) pack(b balancing, oldestFirst bool) *solver {
	s := base.fork(b)
	s.oldestFirst = oldestFirst
	s.prepare()
	s.run()
	s.dissolve()
	s.repack()
	s.coalesce()
	return s
}

// inputOrder indexes pods by their place in the input.
func inputOrder(pods []*corev1.Pod) map[*corev1.Pod]int {
	index := make(map[*corev1.Pod]int, len(pods))
	for i, p := range pods {
		index[p] = i
	}
	return index
}

// nodePrep is what both packings of a Solve start from for an existing node: its room (with its
// volume attachment limits), what its pods use, and their host ports. Read-only.
type nodePrep struct {
	alloc, used vec
	ports       []hostPort
}

// prepareNodes fills s.nodes, through the Cache when there is one (the nodes' allocatable and
// requested resources are the lists every Solve of such a caller shares).
func (s *solver) prepareNodes() {
	s.nodes = make([]nodePrep, len(s.in.Nodes))
	c := s.opts.Cache
	if c != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
	}
	for ni := range s.in.Nodes {
		n, np := &s.in.Nodes[ni], &s.nodes[ni]
		if c != nil {
			np.alloc = c.vecLocked(n.Allocatable, s.ri).v
		} else {
			np.alloc = s.ri.vec(n.Allocatable)
		}
		if len(s.attachDims) > 0 {
			np.alloc = np.alloc.clone()
			s.attachLimits(np.alloc, n.VolumeLimits)
		}
		if n.Requested != nil && s.in.Attachments == nil {
			if c != nil {
				// Requested is Requests(Pods), computed once: the pods' ports go with it.
				e := c.vecLocked(n.Requested, s.ri)
				if !e.portsKnown {
					e.ports, e.portsKnown = nodeHostPorts(n.Pods), true
				}
				np.used, np.ports = e.v, e.ports
				continue
			}
			np.used = s.ri.vec(n.Requested)
		} else {
			np.used = make(vec, s.ri.len())
			for _, p := range n.Pods {
				np.used.add(s.ri.vec(s.withAttachments(p, podRequests(p))))
			}
		}
		np.ports = nodeHostPorts(n.Pods)
	}
}

// nodeHostPorts are the host ports the pods hold.
func nodeHostPorts(pods []*corev1.Pod) []hostPort {
	var out []hostPort
	for _, p := range pods {
		out = append(out, podHostPorts(p)...)
	}
	return out
}

// fork is a packing's solver over the shared preparation, with pools of its own.
func (base *solver) fork(b balancing) *solver {
	s := &solver{in: base.in, opts: base.opts, ri: base.ri, groupIndex: map[string]int{}, domains: map[string]domainSet{},
		balance: b, wellKnown: base.wellKnown, facts: base.facts, attachDims: base.attachDims, nodes: base.nodes,
		offerings: base.offerings, preferNoScheduleTaints: base.preferNoScheduleTaints}
	if base.cluster != nil {
		c := *base.cluster
		s.cluster = &c
	}
	for _, bp := range base.pools {
		s.pools = append(s.pools, bp.fork(s.cluster))
	}
	return s
}

type podItem struct {
	pod   *corev1.Pod
	class *class
}

// prepare builds a packing's own state: the pods' classes and topology groups, and the existing
// nodes with their pods counted.
func (s *solver) prepare() {
	reqs := s.facts.reqs
	// Classes.
	bySig := map[string]*class{}
	for i, p := range s.in.Pods {
		sig := s.facts.sigs[i]
		c, ok := bySig[sig]
		if !ok {
			c = s.buildClass(len(s.classes), p, reqs[i])
			bySig[sig] = c
			s.classes = append(s.classes, c)
		}
		c.pods = append(c.pods, p)
	}
	// Existing pods' required anti-affinity terms make groups too (their symmetry binds new pods).
	var owners []antiAffinityOwner
	for ni := range s.in.Nodes {
		for _, p := range s.in.Nodes[ni].Pods {
			if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil {
				var gs []int
				for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
					if pt, err := s.podTerm(p, t, "pod anti-affinity"); err == nil {
						gs = append(gs, pt.group)
					}
				}
				owners = append(owners, antiAffinityOwner{node: ni, groups: gs})
			}
		}
	}

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

	s.addExisting(owners)
	s.matchClasses()
}

// antiAffinityOwner is an existing node with pods whose required anti-affinity terms make the
// groups named.
type antiAffinityOwner struct {
	node   int
	groups []int
}

// addExisting adds the existing nodes as targets, with their pods counted in the groups they
// match and the anti-affinity groups their pods own.
func (s *solver) addExisting(owners []antiAffinityOwner) {
	// Existing nodes, with their pods counted; their targets and what they use are carved
	// from a slab an earlier Solve left.
	w := s.ri.len()
	s.slab = existingSlabs.Get().(*existingSlab)
	existing, used := s.slab.take(len(s.in.Nodes), w)
	s.targets = slices.Grow(s.targets, len(s.in.Nodes))
	for ni := range s.in.Nodes {
		n := &s.in.Nodes[ni]
		np := &s.nodes[ni]
		// The shared room is both packings' (an existing node's is only read); what it uses is
		// the target's own. Its ports are clipped, so that adding one copies them.
		t := &existing[ni]
		*t = target{id: len(s.targets), existing: n, labels: n.Labels, alloc: np.alloc, used: used[:w:w], ports: slices.Clip(np.ports)}
		used = used[w:]
		copy(t.used, np.used)
		s.targets = append(s.targets, t)
		for _, p := range n.Pods {
			for _, g := range s.groups {
				if g.matches(p.Namespace, p.Labels, s.in.NamespaceLabels) {
					d, _ := t.domain(g.key)
					if vs := n.Undecided[g.key]; d == "" && !g.hostname && len(vs) > 0 {
						g.recordUndecided(vs, true, false)
						continue
					}
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
			if vs := t.existing.Undecided[g.key]; d == "" && !g.hostname && len(vs) > 0 {
				g.recordUndecided(vs, false, true)
				continue
			}
			g.record(t, d, false, true)
		}
	}
}

// matchClasses records the groups each class's pods match, and the least each resource any
// class requests.
func (s *solver) matchClasses() {
	for _, c := range s.classes {
		for gi, g := range s.groups {
			if g.matches(c.ns, c.labels, s.in.NamespaceLabels) {
				c.matches = append(c.matches, gi)
			}
		}
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
