package solver

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
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
