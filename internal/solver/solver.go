package solver

import (
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
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

	// attachDims are the resource dimensions of CSI drivers' volume attachments.
	attachDims []int
	// wellKnown are the provider's label keys (Input.WellKnownLabels).
	wellKnown map[string]bool

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
	wellKnown := wellKnownLabels(in)
	facts := podFactsOf(in)
	// A small batch usually buys few machines, so it will get the second packing: it runs
	// alongside the first, on another core, rather than after it. (The packings only read in.)
	var second *Result
	var wg sync.WaitGroup
	if len(in.Pods) > 1 && len(in.Pods) <= concurrentPackingPods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			second, _ = solve(in, opts, balanceOpen, wellKnown, facts)
		}()
	}
	best, classes := solve(in, opts, balanceLast, wellKnown, facts)
	wg.Wait()
	// With one class of pods there is one queue, and both ways pack alike.
	if len(best.NodeClaims) <= secondPackingClaims && classes > 1 {
		if second == nil {
			second, _ = solve(in, opts, balanceOpen, wellKnown, facts)
		}
		if better(second, best) {
			best = second
		}
	}
	return best
}

// concurrentPackingPods bounds the batches whose second packing starts with the first.
const concurrentPackingPods = 512

func better(a, b *Result) bool {
	if len(a.Unschedulable) != len(b.Unschedulable) {
		return len(a.Unschedulable) < len(b.Unschedulable)
	}
	if pa, pb := a.Price(), b.Price(); pa != pb {
		return pa < pb-1e-9
	}
	return len(a.NodeClaims) < len(b.NodeClaims)
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

// solve packs once and returns the plan and how many classes the pods formed.
func solve(in Input, opts Options, b balancing, wellKnown map[string]bool, facts *podFacts) (*Result, int) {
	s := &solver{in: in, opts: opts, ri: newResourceIndex(), groupIndex: map[string]int{}, domains: map[string]domainSet{}, balance: b,
		wellKnown: wellKnown, facts: facts}
	s.prepare()
	s.run()
	s.repack()
	s.finish()
	return &s.result, len(s.classes)
}

type podItem struct {
	pod   *corev1.Pod
	class *class
}

func (s *solver) prepare() {
	s.registerAttachments()
	reqs := s.facts.reqs
	for i := range s.in.Pods {
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
		s.attachLimits(t.alloc, n.VolumeLimits)
		s.targets = append(s.targets, t)
		summed := n.Requested != nil && s.in.Attachments == nil
		if summed {
			t.used.add(s.ri.vec(n.Requested))
		}
		for _, p := range n.Pods {
			if !summed {
				t.used.add(s.ri.vec(s.withAttachments(p, podRequests(p))))
			}
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
