package solver

import (
	"fmt"
	"slices"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

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

// eligibleDomains returns the values of key a spread counts for the variant's pods. With
// nodeAffinityPolicy Honor, only machines its required node term admits count — every key of the
// node selector and required affinity, not only the spread's; preferred node affinity never
// narrows them. With nodeTaintsPolicy Honor, only machines whose taints the pods tolerate count.
func (s *solver) eligibleDomains(v *variant, key string, honorAffinity, honorTaints bool) domainSet {
	if !honorAffinity && !honorTaints {
		return s.domainsOf(key)
	}
	// The answer depends only on the variant's class and term: keep it on the variant, since
	// topology plans are recomputed after every placement. Below, it is also shared between
	// classes with the same term (computing it reads every instance type of every pool).
	vk := eligibleKey{key: key, affinity: honorAffinity, taints: honorTaints}
	if d, ok := v.eligible[vk]; ok {
		return d
	}
	if v.eligible == nil {
		v.eligible = map[eligibleKey]domainSet{}
	}
	d := s.eligibleDomainsUncached(v, key, honorAffinity, honorTaints)
	v.eligible[vk] = d
	return d
}

// eligibleKey identifies a spread's eligible domains for one variant.
type eligibleKey struct {
	key              string
	affinity, taints bool
}

func (s *solver) eligibleDomainsUncached(v *variant, key string, honorAffinity, honorTaints bool) domainSet {
	ck := fmt.Sprintf("eligible\x00%s\x00%t", key, honorTaints)
	if honorAffinity {
		ck += "\x00" + v.term.key()
	}
	if honorTaints {
		ck += fmt.Sprintf("\x00class %d", v.class.id)
	}
	if d, ok := s.domains[ck]; ok {
		return d
	}
	seen := map[string]bool{}
	for _, p := range s.pools {
		if honorTaints {
			if _, bad := untoleratedTaint(v.class.tolerations, p.np.Taints, false); bad {
				continue
			}
		}
		if !honorAffinity {
			for _, d := range s.poolDomains(key, p) {
				seen[d] = true
			}
			continue
		}
		s.admittedPoolDomains(key, p, v.term, seen)
	}
	for i := range s.in.Nodes {
		n := &s.in.Nodes[i]
		if honorTaints {
			if _, bad := untoleratedTaint(v.class.tolerations, n.Taints, false); bad {
				continue
			}
		}
		if honorAffinity && !v.term.allowsNode(n.Name, n.Labels) {
			continue
		}
		if d, ok := n.Labels[key]; ok {
			seen[d] = true
		}
	}
	d := sortedSet(seen)
	s.domains[ck] = d
	return d
}

// admittedPoolDomains adds to seen the values of key that the pool's machines admitted by the
// node term can have: those of instance types that satisfy the pool's and the term's
// requirements together, within both.
func (s *solver) admittedPoolDomains(key string, p *pool, nt *nodeTerm, seen map[string]bool) {
	if !nt.allowsNew() || p.reqs.Compatible(nt.reqs, s.undefinedOK) != nil {
		return
	}
	merged := p.reqs.Clone()
	merged.AddAll(nt.reqs)
	r, constrained := merged.Get(key)
	of := offeringFilter(merged)
	for _, info := range p.types {
		if !typeAllows(info, merged) {
			continue
		}
		if key == karpv1.ZoneLabelKey {
			// Zones come from the offerings the requirements allow (a spot-only pod does not
			// count a zone that sells the type only on demand).
			for i := range info.it.Offerings {
				o := &info.it.Offerings[i]
				if o.Available && (!of.hasZone || of.zone.Allows(o.Zone)) && (!of.hasCT || of.ct.Allows(o.CapacityType)) {
					seen[o.Zone] = true
				}
			}
			continue
		}
		tr, ok := info.it.Requirements.Get(key)
		switch {
		case ok && tr.IsFinite():
			for _, d := range tr.Values() {
				if !constrained || r.Allows(d) {
					seen[d] = true
				}
			}
		case constrained && r.IsFinite():
			for _, d := range r.Values() {
				if !ok || tr.Allows(d) {
					seen[d] = true
				}
			}
		}
	}
}

func sortedSet(seen map[string]bool) domainSet {
	d := make(domainSet, 0, len(seen))
	for v := range seen {
		d = append(d, v)
	}
	slices.Sort(d)
	return d
}
