package solver

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// group counts pods matching a selector (in some namespaces) per domain of a topology key, and
// separately the pods that own a required anti-affinity term with that selector and key.
type group struct {
	key      string
	hostname bool
	selector labels.Selector
	scope    nsScope

	// counts and owners are per domain value; for the hostname key they are per target id.
	counts     map[string]int32
	owners     map[string]int32
	nodeCounts []int32
	nodeOwners []int32
	// nodeSkews are, for the hostname key, the smallest maxSkew of the required spread
	// constraints on the group of the pods this solve placed on each target (0: none).
	nodeSkews   []int32
	total       int32
	totalOwners int32
	// maybe and maybeOwners count, per domain, the matching pods and owners on in-flight claims
	// that may still land in it (ExistingNode.Undecided): they bar required anti-affinity there,
	// and count for nothing else.
	maybe       map[string]int32
	maybeOwners map[string]int32
}

func (s *solver) group(key string, sel labels.Selector, scope nsScope) int {
	k := key + "\x00" + sel.String() + "\x00" + scope.key()
	if id, ok := s.groupIndex[k]; ok {
		return id
	}
	g := &group{key: key, hostname: key == corev1.LabelHostname, selector: sel, scope: scope,
		counts: map[string]int32{}, owners: map[string]int32{}, maybe: map[string]int32{}, maybeOwners: map[string]int32{}}
	s.groups = append(s.groups, g)
	s.groupIndex[k] = len(s.groups) - 1
	return len(s.groups) - 1
}

func (g *group) matches(ns string, podLabels map[string]string, nsLabels map[string]map[string]string) bool {
	return g.scope.contains(ns, nsLabels) && g.selector.Matches(labels.Set(podLabels))
}

func grow(xs []int32, n int) []int32 {
	if len(xs) > n {
		return xs
	}
	return append(xs, make([]int32, n-len(xs)+1)...)
}

func (g *group) nodeCount(tid int) int32 {
	if tid < len(g.nodeCounts) {
		return g.nodeCounts[tid]
	}
	return 0
}

func (g *group) nodeOwner(tid int) int32 {
	if tid < len(g.nodeOwners) {
		return g.nodeOwners[tid]
	}
	return 0
}

// skewBound is the smallest maxSkew of the group's hostname spread constraints owned by pods
// placed on target tid, or 0.
func (g *group) skewBound(tid int) int32 {
	if tid < len(g.nodeSkews) {
		return g.nodeSkews[tid]
	}
	return 0
}

// bound records a hostname spread constraint of maxSkew owned by a pod placed on target t.
func (g *group) bound(t *target, maxSkew int32) {
	g.nodeSkews = grow(g.nodeSkews, t.id)
	if b := g.nodeSkews[t.id]; b == 0 || maxSkew < b {
		g.nodeSkews[t.id] = maxSkew
	}
}

// record counts a pod placed on target t: matched says the pod matches the group's selector,
// owner that it owns an anti-affinity term of the group.
func (g *group) record(t *target, domain string, matched, owner bool) {
	if g.hostname {
		if matched {
			g.nodeCounts = grow(g.nodeCounts, t.id)
			g.nodeCounts[t.id]++
			g.total++
		}
		if owner {
			g.nodeOwners = grow(g.nodeOwners, t.id)
			g.nodeOwners[t.id]++
			g.totalOwners++
		}
		return
	}
	if domain == "" {
		return
	}
	if matched {
		g.counts[domain]++
		g.total++
	}
	if owner {
		g.owners[domain]++
		g.totalOwners++
	}
}

// recordUndecided counts a pod on an in-flight claim whose value of the group's key is one of
// values, not yet known.
func (g *group) recordUndecided(values []string, matched, owner bool) {
	for _, v := range values {
		if matched {
			g.maybe[v]++
		}
		if owner {
			g.maybeOwners[v]++
		}
	}
}

// domainSet is a small ordered set of domain values.
type domainSet []string

func (d domainSet) intersect(o domainSet) domainSet {
	var out domainSet
	for _, v := range d {
		if slices.Contains(o, v) {
			out = append(out, v)
		}
	}
	return out
}

func (d domainSet) filter(keep func(string) bool) domainSet {
	var out domainSet
	for _, v := range d {
		if keep(v) {
			out = append(out, v)
		}
	}
	return out
}
