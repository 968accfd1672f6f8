package solver

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/requirements"
)

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
	if s.oldestFirst {
		// One queue, in the input's order.
		index := inputOrder(s.in.Pods)
		queue := append(cpuHeavy, memHeavy...)
		slices.SortStableFunc(queue, func(a, b podItem) int { return index[a.pod] - index[b.pod] })
		cpuHeavy, memHeavy = queue, nil
	}
	for len(cpuHeavy)+len(memHeavy) > 0 {
		var it podItem
		if s.wantsMemory(cpuHeavy, memHeavy) {
			it, memHeavy = memHeavy[0], memHeavy[1:]
		} else {
			it, cpuHeavy = cpuHeavy[0], cpuHeavy[1:]
		}
		s.placeCounted(it)
	}
	// Pods that fail may fit once others are placed (pod affinity to a pod later in the order),
	// so failures are retried until a pass places nothing new.
	failed := s.failed
	for len(failed) > 0 {
		if s.limitsMissed(failed) {
			s.limitsTight = true
			s.tightenLimited()
		}
		s.failed = nil
		s.cursor = 0
		for _, it := range failed {
			it.class.left++
		}
		for _, it := range failed {
			s.placeCounted(it)
		}
		if len(s.failed) == len(failed) {
			for _, it := range s.failed {
				m := s.reasons[it.pod]
				s.result.Unschedulable = append(s.result.Unschedulable, PodError{Pod: it.pod, Reason: m.reason, Pools: m.pools})
			}
			return
		}
		failed = s.failed
	}
}

// limitsMissed reports whether a pod failed for a pool's limits.
func (s *solver) limitsMissed(failed []podItem) bool {
	for _, it := range failed {
		for _, m := range s.reasons[it.pod].pools {
			if m.Stage == MissLimits {
				return true
			}
		}
	}
	return false
}

// tightenLimited narrows every claim of a pool with limits to the candidates priced within
// limitedPriceSpread of the cheapest one that holds its pods now (and those no larger than the
// largest of them, nearInPrice), and gives back to the pool what
// the claim no longer reserves. A claim is created with the candidates near the type it was meant
// to grow to; a claim that did not grow (one pod per machine, an anti-affinity) would otherwise
// hold, against the limit, a machine many times its size, and pods that fit within the limit
// would be left pending. The pods that failed for the limits are then tried again.
func (s *solver) tightenLimited() {
	for _, t := range s.targets {
		if !t.isClaim() || !t.pool.capped() || len(t.candidates) == 0 || len(t.pods) == 0 || hasMinValues(t.reqs) {
			continue
		}
		cheapest := math.Inf(1)
		for _, info := range t.candidates {
			if t.used.lessEq(info.alloc) {
				cheapest = min(cheapest, info.minPrice)
			}
		}
		if math.IsInf(cheapest, 1) {
			continue
		}
		bound := cheapest * (1 + limitedPriceSpread)
		keep := nearInPrice(t.candidates, func(info *itInfo) bool { return info.minPrice <= bound },
			func(info *itInfo) bool { return t.used.lessEq(info.alloc) })
		if len(keep) < len(t.candidates) {
			t.setCandidates(keep)
		}
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
func (s *solver) placeCounted(it podItem) {
	if m := s.place(it); m.reason != "" {
		s.failed = append(s.failed, it)
		if s.reasons == nil {
			s.reasons = map[*corev1.Pod]podMiss{}
		}
		s.reasons[it.pod] = m
	}
	it.class.left--
	for s.cursor < len(s.order) && s.order[s.cursor].left <= 0 {
		s.cursor++
	}
}

// podMiss is why a pod fits nowhere: in words, and per NodePool.
type podMiss struct {
	reason string
	pools  []PoolMiss
}

// place puts one pod somewhere, relaxing preferences as needed, or returns why it fits nowhere
// (with its last variant, the most relaxed).
func (s *solver) place(it podItem) podMiss {
	c := it.class
	if c.err != nil {
		return podMiss{reason: c.err.Error()}
	}
	ignore := s.opts.IgnorePreferences
	var miss podMiss
	for i := c.firstVariant(ignore); i < c.variantCount(); i = c.nextVariant(i, ignore) {
		v := s.variant(c, i)
		if v.reqs.Empty() {
			miss = podMiss{reason: "requirements cannot be satisfied: " + v.reqs.String()}
			continue
		}
		mono := v.monotonicOnExisting()
		start := 0
		if mono {
			start = v.existingFrom
		}
		// The cursor skips, for the variant's later pods, the nodes that refused this one; a
		// node that refused it only because it is a moved pod (RefusesMoved) may take the next
		// pod of the variant, which may not be one.
		moved := s.in.Moved[it.pod.UID]
		refused, placed := -1, false
		i := start
		for ; i < len(s.targets) && !s.targets[i].isClaim(); i++ {
			if moved && s.targets[i].existing.RefusesMoved {
				if refused < 0 {
					refused = i
				}
				continue
			}
			if placed = s.tryExisting(v, s.targets[i], it.pod); placed {
				break
			}
		}
		if mono {
			v.existingFrom = i
			if refused >= 0 {
				v.existingFrom = refused
			}
		}
		if placed {
			return podMiss{}
		}
		if s.tryOpenClaims(v, it.pod) {
			return podMiss{}
		}
		var pools []PoolMiss
		for _, p := range s.pools {
			r, stage := s.tryNew(v, p, it.pod)
			if r == "" {
				return podMiss{}
			}
			pools = append(pools, PoolMiss{NodePool: p.np.Name, Stage: stage, Reason: r})
		}
		miss = podMiss{reason: "no NodePool", pools: pools}
		if len(pools) > 0 {
			why := make([]string, len(pools))
			for i, m := range pools {
				why[i] = fmt.Sprintf("NodePool %s: %s", m.NodePool, m.Reason)
			}
			miss.reason = strings.Join(why, "; ")
		}
		if rel := v.describeRelaxed(); rel != "" {
			miss.reason += " (" + rel + ")"
		}
	}
	return miss
}

func (s *solver) tryExisting(v *variant, t *target, pod *corev1.Pod) bool {
	if t.existing.Unschedulable || !t.used.fitsWith(v.class.req, t.alloc) || t.existing.RefusesMoved && s.in.Moved[pod.UID] {
		return false
	}
	if _, bad := untoleratedTaint(v.class.tolerations, t.existing.Taints, v.avoidPreferNoS); bad {
		return false
	}
	if _, ok := v.reqs.Satisfied(t.labels); !ok {
		return false
	}
	if !allowsUndecided(v.reqs, t.existing.Undecided) {
		return false
	}
	if v.term.name != nil && !v.term.name.Allows(t.existing.Name) {
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

// allowsUndecided reports whether the requirements admit every value an in-flight claim may
// still take for the keys it has not decided: the launch picks one, and a pod whose affinity
// rejects it would be on a machine it does not accept.
func allowsUndecided(reqs requirements.Requirements, undecided map[string][]string) bool {
	for key, values := range undecided {
		r, ok := reqs.Get(key)
		if !ok {
			continue
		}
		for _, v := range values {
			if !r.Allows(v) {
				return false
			}
		}
	}
	return true
}
