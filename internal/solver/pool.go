package solver

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/spend"
)

// itInfo is an instance type with its resources as vectors.
type itInfo struct {
	it       *cloudprovider.InstanceType
	alloc    vec
	capacity vec
	// labels are the type's single-valued requirement keys, for minValues counting; built on
	// first use (most solves never count minValues), see typeLabels. The packings of a Solve
	// share the type, hence the Once.
	labels     map[string]string
	labelsOnce sync.Once
	// minPrice is the cheapest available offering the pool allows, plus the pool's NodeCost.
	minPrice float64
	// nodeCost is the pool's NodeCost, added to every offering's price.
	nodeCost float64
	// offMask has a bit per (zone, capacity type) the type is available in; offPrice holds the
	// price of each, when the solver's offering index is small enough for masks.
	offMask  uint64
	offPrice []float64
	// efficiency is the value of the type's capacity at the batch's dual resource prices, per
	// dollar: 1 for the types an optimal fractional purchase uses, less for the others.
	efficiency float64
	// daemon is what the pool's DaemonSets that run on this type request; alloc is net of it.
	daemon vec
	// daemonPorts are the host ports those DaemonSets hold.
	daemonPorts []hostPort
	// pos is the type's position in its pool's types.
	pos int32
}

// typeLabels returns the type's single-valued requirement keys and values, building them once.
func (info *itInfo) typeLabels() map[string]string {
	info.labelsOnce.Do(func() { info.labels = info.it.Requirements.Labels() })
	return info.labels
}

// pool is a NodePool prepared for a solve.
type pool struct {
	np    *NodePool
	idx   int
	reqs  requirements.Requirements
	types []*itInfo
	// daemon is the DaemonSet overhead every type of the pool carries (the least of the types'),
	// for messages.
	daemon vec
	// remaining is what is left of the limits; limited marks the dimensions that have a limit.
	remaining vec
	limited   []bool
	// cluster is the cluster's spending limit, shared by every pool of a packing; nil without one.
	cluster *clusterBudget
	// fits caches, per variant requirement key, whether and how the variant fits the pool.
	fits map[string]*poolFit
	// dims and duals are the resources the solve's pods request and their dual prices per
	// milli-unit, from the linear relaxation over the pool's types; nil when it has none.
	dims  []int
	duals []float64
	// granule is the CPU (milli) of the machine size near-tied targets are chosen by: a share of
	// the solve's CPU demand (burstShare), or unbounded (the largest near-tie); set with duals.
	granule int64
	// byEfficiency is types by efficiency, most efficient first (set with duals); mark and epoch
	// let mostEfficient tell a claim's candidates apart without a map.
	byEfficiency []*itInfo
	mark         []uint32
	epoch        uint32
}

// fork returns the pool for one packing: the types, prices and efficiencies are shared (no
// packing writes them); what is left of the limits, the fit cache and mostEfficient's marks are
// its own, and cluster the packing's own copy of the cluster's spending limit (shared by its pools).
func (p *pool) fork(cluster *clusterBudget) *pool {
	f := *p
	f.fits = map[string]*poolFit{}
	f.remaining = slices.Clone(p.remaining)
	f.cluster = cluster
	f.mark, f.epoch = nil, 0
	return &f
}

// clusterBudget is what is left of the cluster's spending limit (Input.SpendingLeft) in one
// packing, in the milli-dollars of resource dimension dim.
type clusterBudget struct {
	dim  int
	left int64
}

// capped reports whether a limit binds the pool's claims: its own limits or the cluster's
// spending limit.
func (p *pool) capped() bool { return p.remaining != nil || p.cluster != nil }

// fitsLimits reports whether a machine of the given capacity fits what is left of the pool's
// limits and of the cluster's spending limit.
func (p *pool) fitsLimits(capacity vec) bool {
	if p.remaining != nil && !withinLimits(capacity, p.remaining, p.limited) {
		return false
	}
	return p.cluster == nil || capacity[p.cluster.dim] <= p.cluster.left
}

// release gives back to the pool's limits (and the cluster's spending limit) what a claim no
// longer reserves: was less now.
func (p *pool) release(was, now vec) {
	for i, lim := range p.limited {
		if lim {
			p.remaining[i] += was[i] - now[i]
		}
	}
	if c := p.cluster; c != nil {
		c.left += was[c.dim] - now[c.dim]
	}
}

// poolFit is what a variant can get from a pool.
type poolFit struct {
	reason string
	// stage is the check that failed, when reason is set.
	stage MissStage
	reqs  requirements.Requirements
	types []*itInfo
}

// undefinedOK says which label keys a NodePool need not define: those its instance types,
// offerings or the provider resolve.
func (s *solver) undefinedOK(key string) bool {
	switch key {
	case karpv1.ZoneLabelKey, karpv1.InstanceTypeLabelKey, karpv1.ArchLabelKey, karpv1.OSLabelKey,
		karpv1.CapacityTypeLabelKey, karpv1.RegionLabelKey, karpv1.WindowsBuildLabelKey,
		corev1.LabelFailureDomainBetaZone, corev1.LabelInstanceType:
		return true
	}
	return s.wellKnown[key]
}

// wellKnownLabels are the provider's keys: as given, or those some instance type defines.
func wellKnownLabels(in Input) map[string]bool {
	out := map[string]bool{}
	if in.WellKnownLabels != nil {
		for _, k := range in.WellKnownLabels {
			out[k] = true
		}
		return out
	}
	for i := range in.NodePools {
		for _, it := range in.NodePools[i].InstanceTypes {
			it.Requirements.Each(func(r requirements.Requirement) { out[r.Key] = true })
		}
	}
	return out
}

// typeKeys are the keys of reqs that the instance type resolves (Kubernetes' node labels and the
// provider's well-known labels, except those a machine gets at launch) and that the requirement
// needs present: a type must define each of them, with a value reqs allows, or its machines will
// not carry the label. Other keys are the pool's to set, and checked against it.
func (s *solver) typeKeys(reqs requirements.Requirements) []string {
	var out []string
	reqs.Each(func(r requirements.Requirement) {
		_, deprecated := karpv1.NormalizedLabels[r.Key]
		if !r.AllowsAbsent() && !launchLabel(r.Key) && !deprecated && s.undefinedOK(r.Key) {
			out = append(out, r.Key)
		}
	})
	return out
}

// definesAllKeys reports whether the type carries every one of the keys.
func definesAllKeys(it *cloudprovider.InstanceType, keys []string) bool {
	for _, k := range keys {
		if !it.Requirements.Has(k) {
			return false
		}
	}
	return true
}

func (s *solver) newPool(np *NodePool, idx int) *pool {
	p := &pool{np: np, idx: idx, reqs: np.Requirements.Clone(), fits: map[string]*poolFit{}}
	p.reqs.Add(requirements.Single(karpv1.NodePoolLabelKey, np.Name))
	var admitted *poolTypes
	if s.opts.Cache != nil {
		admitted = s.opts.Cache.poolTypes(np, &s.in, func() *poolTypes { return s.admit(np, p.reqs) })
	} else {
		admitted = s.admit(np, p.reqs)
	}
	// The offering masks made with the same index serve again.
	masks := admitted.indexed && s.offerings.ok && slices.Equal(admitted.zones, s.offerings.zones) && slices.Equal(admitted.cts, s.offerings.cts)
	nodes, limitsNodes := s.ri.pos[karpv1.ResourceNodes]
	spendDim, limitsSpend := s.ri.pos[spend.LimitKey]
	_, ownSpendLimit := np.Remaining[spend.LimitKey]
	limitsSpend = limitsSpend && (ownSpendLimit || s.in.SpendingLeft != nil)
	for i := range admitted.list {
		t := &admitted.list[i]
		info := &itInfo{it: t.it, alloc: t.alloc, capacity: t.capacity, minPrice: t.price + np.NodeCost, nodeCost: np.NodeCost}
		if s.opts.Cache != nil {
			// The cached vectors are every Solve's; this one's are its own to change.
			info.alloc, info.capacity = s.extend(t.alloc), s.extend(t.capacity)
		}
		s.attachLimits(info.alloc, t.it.VolumeLimits)
		if limitsNodes {
			// Every machine is one node of a limit on nodes.
			info.capacity[nodes] = 1000
		}
		if limitsSpend {
			// Against a spending limit a machine counts the most it may cost in the pool.
			w, _ := spend.WorstCase(t.it, p.reqs)
			info.capacity[spendDim] = spend.Milli(w)
		}
		if masks {
			info.offMask, info.offPrice = t.offMask, t.offPrice
		} else {
			s.offerings.index(info)
		}
		p.types = append(p.types, info)
	}
	s.daemonOverhead(p)
	if np.Remaining != nil {
		p.remaining = s.ri.vec(np.Remaining)
		p.limited = make([]bool, s.ri.len())
		for n := range np.Remaining {
			p.limited[s.ri.pos[n]] = true
		}
	}
	return p
}

// admit filters the pool's instance types as reqs (the pool's requirements) and its well-known
// keys allow, with their cheapest allowed offering, cheapest first; each with its capacity and
// its capacity less overhead (floored at zero, InstanceType.Allocatable without building its
// resource list), and its offering masks at the solver's offering index.
func (s *solver) admit(np *NodePool, reqs requirements.Requirements) *poolTypes {
	// A pool's requirement on a provider label (karpenter.k8s.aws/instance-gpu-count Exists)
	// admits only the types that carry it.
	must := s.typeKeys(np.Requirements)
	of := offeringFilter(reqs)
	out := &poolTypes{zones: s.offerings.zones, cts: s.offerings.cts, indexed: s.offerings.ok}
	for _, it := range np.InstanceTypes {
		if err := it.Requirements.Intersects(reqs); err != nil {
			continue
		}
		if !definesAllKeys(it, must) {
			continue
		}
		price, ok := of.cheapest(it)
		if !ok {
			continue
		}
		capacity := s.ri.vec(it.Capacity)
		alloc := capacity.clone()
		for n, q := range it.Overhead {
			if _, has := it.Capacity[n]; has {
				i := s.ri.pos[n] // registered with the capacity
				alloc[i] = max(0, alloc[i]-q.MilliValue())
			}
		}
		info := itInfo{it: it}
		s.offerings.index(&info)
		out.list = append(out.list, typeTemplate{it: it, price: price, capacity: capacity, alloc: alloc, offMask: info.offMask, offPrice: info.offPrice})
	}
	sort.SliceStable(out.list, func(i, j int) bool {
		if pi, pj := out.list[i].price+np.NodeCost, out.list[j].price+np.NodeCost; pi != pj {
			return pi < pj
		}
		return out.list[i].it.Name < out.list[j].it.Name
	})
	return out
}

// extend copies v to the length of the solver's resource index (a cached vector may be shorter
// or longer; the positions past either end are zeros).
func (s *solver) extend(v vec) vec {
	out := make(vec, s.ri.len())
	copy(out, v)
	return out
}

// daemonOverhead charges each of the pool's types with the DaemonSets that would run on a machine
// of that type: those tolerating the pool's taints whose node selector and required node affinity
// admit the pool's labels and the type's own (architecture, family, GPU labels, zones…). A type's
// alloc becomes what is left for pods.
func (s *solver) daemonOverhead(p *pool) {
	p.daemon = make(vec, s.ri.len())
	var daemons []daemonOnPool
	for _, ds := range s.in.DaemonSetPods {
		if _, untolerated := untoleratedTaint(ds.Spec.Tolerations, p.np.Taints, false); untolerated {
			continue
		}
		terms, err := podNodeTerms(ds)
		if err != nil {
			continue
		}
		d := daemonOnPool{req: s.ri.vec(podRequests(ds)), ports: podHostPorts(ds)}
		for i := range terms {
			if !terms[i].allowsNew() || p.reqs.Compatible(terms[i].reqs, s.undefinedOK) != nil {
				continue
			}
			d.terms = append(d.terms, daemonTerm{reqs: terms[i].reqs, typeKeys: s.typeKeys(terms[i].reqs)})
		}
		if len(d.terms) > 0 {
			daemons = append(daemons, d)
		}
	}
	kept := p.types[:0]
	for _, info := range p.types {
		info.daemon = make(vec, s.ri.len())
		for i := range daemons {
			if daemons[i].runsOn(info.it.Requirements) {
				info.daemon.add(daemons[i].req)
				info.daemonPorts = append(info.daemonPorts, daemons[i].ports...)
			}
		}
		if !info.daemon.lessEq(info.alloc) {
			// Its own DaemonSets would not fit on it: no pod should be planned there.
			continue
		}
		info.alloc.sub(info.daemon)
		if len(kept) == 0 {
			copy(p.daemon, info.daemon)
		} else {
			p.daemon.minInto(info.daemon)
		}
		kept = append(kept, info)
	}
	p.types = kept
	for i, info := range p.types {
		info.pos = int32(i)
	}
}

// daemonOnPool is a DaemonSet's pod as it applies to one pool: the node terms that admit the pool.
type daemonOnPool struct {
	terms []daemonTerm
	req   vec
	ports []hostPort
}

// daemonTerm is a node term that admits a pool; typeKeys are the keys it needs that the pool does
// not define, so the instance type must.
type daemonTerm struct {
	reqs     requirements.Requirements
	typeKeys []string
}

// runsOn reports whether one of the terms admits a machine of the type.
func (d *daemonOnPool) runsOn(typeReqs requirements.Requirements) bool {
	for _, t := range d.terms {
		if typeReqs.Intersects(t.reqs) != nil {
			continue
		}
		defined := true
		for _, k := range t.typeKeys {
			if !typeReqs.Has(k) {
				defined = false
				break
			}
		}
		if defined {
			return true
		}
	}
	return false
}

// launchLabel says which label keys a machine gets only when it launches, so a DaemonSet
// selecting on them cannot be ruled out for a type in advance.
func launchLabel(key string) bool {
	switch key {
	case corev1.LabelHostname, karpv1.RegionLabelKey, corev1.LabelFailureDomainBetaRegion, karpv1.WindowsBuildLabelKey:
		return true
	}
	return false
}

// CheapestOffering is the lowest price among the type's available offerings whose zone and
// capacity type reqs allow.
func CheapestOffering(it *cloudprovider.InstanceType, reqs requirements.Requirements) (float64, bool) {
	f := offeringFilter(reqs)
	return f.cheapest(it)
}

// offeringReqs are the zone and capacity-type requirements offerings are checked against.
type offeringReqs struct {
	zone, ct       requirements.Requirement
	hasZone, hasCT bool
}

func offeringFilter(reqs requirements.Requirements) offeringReqs {
	var o offeringReqs
	o.zone, o.hasZone = reqs.Get(karpv1.ZoneLabelKey)
	o.ct, o.hasCT = reqs.Get(karpv1.CapacityTypeLabelKey)
	return o
}

// cheapest is the lowest price among the type's available offerings the requirements allow.
func (f *offeringReqs) cheapest(it *cloudprovider.InstanceType) (float64, bool) {
	zone, hasZone, ct, hasCT := &f.zone, f.hasZone, &f.ct, f.hasCT
	best, found := math.Inf(1), false
	for i := range it.Offerings {
		o := &it.Offerings[i]
		if !o.Available || hasZone && !zone.Allows(o.Zone) || hasCT && !ct.Allows(o.CapacityType) {
			continue
		}
		if o.Price < best {
			best, found = o.Price, true
		}
	}
	return best, found
}

// typeAllows reports whether a machine of the type can satisfy reqs: labels compatible and an
// available offering in an allowed zone and capacity type.
func typeAllows(info *itInfo, reqs requirements.Requirements) bool {
	if info.it.Requirements.Intersects(reqs) != nil {
		return false
	}
	_, ok := CheapestOffering(info.it, reqs)
	return ok
}

// untoleratedTaint returns the first NoSchedule or NoExecute taint (and PreferNoSchedule when
// avoidPreferNoSchedule) the tolerations do not tolerate.
func untoleratedTaint(tolerations []corev1.Toleration, taints []corev1.Taint, avoidPreferNoSchedule bool) (corev1.Taint, bool) {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule && !avoidPreferNoSchedule {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(klog.Background(), t, false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return *t, true
		}
	}
	return corev1.Taint{}, false
}

func describeTaint(t corev1.Taint) string {
	if t.Value == "" {
		return fmt.Sprintf("%s:%s", t.Key, t.Effect)
	}
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

// fit computes what the variant can get from the pool: whether a new machine can match its node
// name, the pool's requirements and instance types narrowed by the variant's (once per
// requirement key: classes with equal requirements share them, whatever their tolerations), and
// whether the class tolerates the pool's taints (once per class).
func (s *solver) fit(v *variant, p *pool) *poolFit {
	if !v.term.allowsNew() {
		return errNewNodeName
	}
	f := s.reqsFit(v, p)
	if f.reason != "" {
		return f
	}
	// Taints after requirements: a pool the pod's requirements exclude is further from taking
	// it than one whose taint it lacks a toleration for (PoolMiss stages).
	if tf := s.taintFit(v, p); tf != nil {
		return tf
	}
	return f
}

// reqsFit is the pool's requirements and instance types narrowed by the variant's, kept per
// requirement key.
func (s *solver) reqsFit(v *variant, p *pool) *poolFit {
	if f, ok := p.fits[v.reqsKey]; ok {
		return f
	}
	f := &poolFit{}
	p.fits[v.reqsKey] = f
	if err := p.reqs.Compatible(v.reqs, s.undefinedOK); err != nil {
		f.reason, f.stage = "incompatible requirements: "+err.Error(), MissRequirements
		return f
	}
	f.reqs = p.reqs.Clone()
	f.reqs.AddAll(v.reqs)
	if v.reqs.Len() == 0 {
		f.types = p.types
	} else {
		must := s.typeKeys(v.reqs)
		for _, info := range p.types {
			if typeAllows(info, f.reqs) && definesAllKeys(info.it, must) {
				f.types = append(f.types, info)
			}
		}
	}
	switch {
	case len(f.types) > 0:
	case v.reqs.Len() == 0:
		f.reason, f.stage = "none of its instance types has an offering available now (its requirements allow)", MissRequirements
	default:
		f.reason, f.stage = "no instance type satisfies "+v.reqs.String(), MissRequirements
	}
	return f
}

// errNewNodeName is the fit of a pod whose required node affinity names the nodes it may run on:
// a new machine's name is not one of them.
var errNewNodeName = &poolFit{reason: "required node affinity matchFields metadata.name selects existing nodes only", stage: MissRequirements}

// taintFit returns a failed fit when the variant's class does not tolerate the pool's taints, or
// nil; the answer is kept per class, pool and PreferNoSchedule avoidance.
func (s *solver) taintFit(v *variant, p *pool) *poolFit {
	c := v.class
	if c.taintFits == nil {
		c.taintFits = make([]*poolFit, 2*len(s.pools))
	}
	i := 2 * p.idx
	if v.avoidPreferNoS {
		i++
	}
	f := c.taintFits[i]
	if f == nil {
		f = taintsTolerated
		if t, bad := untoleratedTaint(c.tolerations, p.np.Taints, v.avoidPreferNoS); bad {
			f = &poolFit{reason: fmt.Sprintf("taint %s not tolerated", describeTaint(t)), stage: MissTaint}
		}
		c.taintFits[i] = f
	}
	if f == taintsTolerated {
		return nil
	}
	return f
}

// taintsTolerated marks a class and pool whose taints the class tolerates.
var taintsTolerated = &poolFit{}
