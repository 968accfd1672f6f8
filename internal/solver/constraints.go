package solver

import (
	"fmt"
	"slices"
	"strings"
)

// narrowing fixes a planned claim's value of a topology key.
type narrowing struct{ key, value string }

// topoPlan is what a pod's topology constraints allow at this moment, before looking at any
// target: per non-hostname key, the allowed domains. It changes only when a pod is placed.
type topoPlan struct {
	keys []keyPlan
	// version is the solver's placement count the plan was made at.
	version int
}

type keyPlan struct {
	key string
	// constrained is false for keys the pod is only counted on; then any domain will do.
	constrained bool
	allowed     domainSet
	// spread is the first spread group on the key; among allowed domains the least used wins.
	spread *group
	err    error
}

// plan returns the variant's topology plan for the current counts.
func (s *solver) plan(v *variant) *topoPlan {
	if v.plan != nil && v.plan.version == s.version {
		return v.plan
	}
	p := &topoPlan{version: s.version}
	addKey := func(gi int) {
		g := s.groups[gi]
		if g.hostname {
			return
		}
		for _, k := range p.keys {
			if k.key == g.key {
				return
			}
		}
		p.keys = append(p.keys, keyPlan{key: g.key})
	}
	for _, sc := range v.spreads {
		addKey(sc.group)
	}
	for _, a := range v.affinity {
		addKey(a.group)
	}
	for _, a := range v.anti {
		addKey(a.group)
	}
	for _, gi := range v.class.matches {
		addKey(gi)
	}
	for i := range p.keys {
		s.planKey(v, &p.keys[i])
	}
	v.plan = p
	return p
}

func (s *solver) planKey(v *variant, kp *keyPlan) {
	key := kp.key
	allowed := s.domainsOf(key)
	for _, sc := range v.spreads {
		g := s.groups[sc.group]
		if g.key != key {
			continue
		}
		kp.constrained = true
		if kp.spread == nil {
			kp.spread = g
		}
		eligible := s.eligibleDomains(v, key, sc.honorAffinity, sc.honorTaints)
		minCount := int32(0)
		if int32(len(eligible)) >= sc.minDomains && len(eligible) > 0 {
			minCount = g.counts[eligible[0]]
			for _, d := range eligible[1:] {
				minCount = min(minCount, g.counts[d])
			}
		}
		self := b2i(sc.selfMatch)
		before := allowed
		allowed = allowed.filter(func(d string) bool {
			return g.counts[d]+self-minCount <= sc.maxSkew && slices.Contains(eligible, d)
		})
		if len(allowed) == 0 {
			kp.err = spreadFailure{desc: sc.desc, g: g, allowed: before, eligible: eligible}
			return
		}
	}
	for _, a := range v.affinity {
		g := s.groups[a.group]
		if g.key != key {
			continue
		}
		kp.constrained = true
		if g.total == 0 && a.selfMatch {
			continue
		}
		allowed = allowed.filter(func(d string) bool { return g.counts[d] > 0 })
		if len(allowed) == 0 {
			kp.err = failure(a.desc + ": no matching pod in any " + shortKey(key))
			return
		}
	}
	for _, a := range v.anti {
		g := s.groups[a.group]
		if g.key != key {
			continue
		}
		kp.constrained = true
		allowed = allowed.filter(func(d string) bool { return g.counts[d] == 0 && g.maybe[d] == 0 })
		if len(allowed) == 0 {
			kp.err = failure(a.desc + ": every " + shortKey(key) + " has a matching pod (or one on a machine being launched that may land there)")
			return
		}
	}
	for _, gi := range v.class.matches {
		g := s.groups[gi]
		if g.key != key || g.totalOwners == 0 && len(g.maybeOwners) == 0 {
			continue
		}
		kp.constrained = true
		allowed = allowed.filter(func(d string) bool { return g.owners[d] == 0 && g.maybeOwners[d] == 0 })
		if len(allowed) == 0 {
			kp.err = failure("pod anti-affinity of placed pods excludes every " + shortKey(key))
			return
		}
	}
	kp.allowed = allowed
}

// topology checks the pod's topology spread, pod affinity and anti-affinity (and the symmetric
// anti-affinity of pods already placed) against target t. For a planned claim it returns the
// topology values the claim must be narrowed to.
func (s *solver) topology(v *variant, t *target) ([]narrowing, error) {
	c := v.class
	if len(v.spreads) == 0 && len(v.affinity) == 0 && len(v.anti) == 0 && len(c.matches) == 0 {
		return nil, nil
	}
	if s.hostnameBlocked(v, t.id) {
		return nil, errHostnameBlocked
	}
	for _, a := range v.affinity {
		g := s.groups[a.group]
		if g.hostname && g.nodeCount(t.id) == 0 && !(g.total == 0 && a.selfMatch) {
			return nil, errNoAffinityOnNode
		}
	}
	var out []narrowing
	for _, kp := range s.plan(v).keys {
		if kp.err != nil {
			return nil, kp.err
		}
		n, err := s.topologyKey(&kp, t)
		if err != nil {
			return nil, err
		}
		if n != nil {
			out = append(out, *n)
		}
	}
	return out, nil
}

func b2i(b bool) int32 {
	if b {
		return 1
	}
	return 0
}

// hostnameBlocked reports the hostname constraints that can never again be met on target id: a
// matching pod for anti-affinity, a full spread, anti-affinity owned by a pod there, or a
// spread owned by a pod there that the pod would take past its maxSkew.
func (s *solver) hostnameBlocked(v *variant, id int) bool {
	for _, sc := range v.spreads {
		if g := s.groups[sc.group]; g.hostname && g.nodeCount(id)+b2i(sc.selfMatch) > sc.maxSkew {
			return true
		}
	}
	for _, a := range v.anti {
		if g := s.groups[a.group]; g.hostname && g.nodeCount(id) > 0 {
			return true
		}
	}
	for _, gi := range v.class.matches {
		if g := s.groups[gi]; g.hostname && (g.nodeOwner(id) > 0 || overSkew(g, id, 1)) {
			return true
		}
	}
	return false
}

// overSkew reports whether n more pods matching hostname group g on target id would take the
// count past the maxSkew of a spread constraint that a pod placed there by this solve owns. The
// kube-scheduler checks a pod's spread only when it binds that pod, so a pod it selects that
// binds to the machine first would turn the spread pod away: the plan counts as if the spread
// pod binds last, with an empty machine elsewhere (hostname domains can always be new).
func overSkew(g *group, id int, n int32) bool {
	b := g.skewBound(id)
	return b > 0 && g.nodeCount(id)+n > b
}

// options are the values key can take on t.
func (s *solver) options(t *target, key string) domainSet {
	if !t.isClaim() {
		if v, ok := t.labels[key]; ok {
			return domainSet{v}
		}
		return nil
	}
	r, constrained := t.reqs.Get(key)
	return s.domainsOf(key).filter(func(d string) bool {
		if constrained && !r.Allows(d) {
			return false
		}
		for _, info := range t.candidates {
			if tr, ok := info.it.Requirements.Get(key); !ok || tr.Allows(d) {
				return true
			}
		}
		return false
	})
}

func (s *solver) topologyKey(kp *keyPlan, t *target) (*narrowing, error) {
	key := kp.key
	cur, narrowed := t.domain(key)
	if !t.isClaim() || narrowed {
		if kp.constrained && (!narrowed || !slices.Contains(kp.allowed, cur)) {
			return nil, keyFailure{key: key, what: "the node's %s is not allowed by the pod's topology constraints"}
		}
		return nil, nil
	}
	opts := s.options(t, key)
	if kp.constrained {
		opts = opts.intersect(kp.allowed)
	}
	if len(opts) == 0 {
		if kp.constrained {
			return nil, keyFailure{key: key, what: "no %s allowed by the pod's topology constraints is possible for the node"}
		}
		return nil, nil
	}
	choice := opts[0]
	if kp.spread != nil {
		for _, d := range opts[1:] {
			if kp.spread.counts[d] < kp.spread.counts[choice] {
				choice = d
			}
		}
	}
	return &narrowing{key: key, value: choice}, nil
}

// spreadFailure renders its message only when asked: most failed attempts are never reported.
type spreadFailure struct {
	desc              string
	g                 *group
	allowed, eligible domainSet
}

func (f spreadFailure) Error() string {
	parts := make([]string, 0, len(f.eligible))
	for _, d := range f.eligible {
		parts = append(parts, fmt.Sprintf("%s=%d", d, f.g.counts[d]))
	}
	return fmt.Sprintf("%s cannot be satisfied: only %ss %s allowed; matching pods per %s: %s",
		f.desc, shortKey(f.g.key), strings.Join(f.allowed, ", "), shortKey(f.g.key), strings.Join(parts, ", "))
}

var (
	errHostnameBlocked  = failure("hostname topology constraints cannot be satisfied on the node")
	errNoAffinityOnNode = failure("required pod affinity on hostname: no matching pod on the node")
)

// keyFailure is a reason about one topology key, rendered only when asked.
type keyFailure struct{ key, what string }

func (f keyFailure) Error() string { return fmt.Sprintf(f.what, shortKey(f.key)) }

// failure is a reason built from constant parts.
type failure string

func (f failure) Error() string { return string(f) }
