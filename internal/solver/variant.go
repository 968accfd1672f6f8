package solver

import (
	"strings"

	"capstan.dev/capstan/internal/requirements"
)

// variant is a class with some of its preferences relaxed and one of its ORed node-affinity terms
// chosen: the constraints a placement attempt enforces.
type variant struct {
	class *class
	index int
	// term is the required node term the variant enforces; reqs adds its preferences to it.
	term *nodeTerm
	reqs requirements.Requirements
	// reqsKey identifies reqs, so variants with equal requirements share pool fits.
	reqsKey        string
	spreads        []spreadConstraint
	affinity       []podTerm
	anti           []podTerm
	avoidPreferNoS bool
	relaxed        []string
	// dead marks, by target id, the planned claims this variant can never join: failures that
	// only get worse as claims fill up (resources, requirements, taints, host ports,
	// hostname anti-affinity and spread).
	dead []uint64
	// plan caches the topology plan for the current placement count.
	plan *topoPlan
	// cursor is the first open claim the variant might still join.
	cursor int
	// existingFrom is the first existing node the variant might still fit, when its fit on
	// existing nodes only ever gets worse as pods are placed (monotonic); see monotonicOnExisting.
	existingFrom int
	// eligible caches the eligible domains of the variant's spreads.
	eligible map[eligibleKey]domainSet
}

func (v *variant) isDead(id int) bool {
	w := id >> 6
	return w < len(v.dead) && v.dead[w]&(1<<(id&63)) != 0
}

func (v *variant) markDead(id int) {
	w := id >> 6
	for len(v.dead) <= w {
		v.dead = append(v.dead, 0)
	}
	v.dead[w] |= 1 << (id & 63)
}

// variantCount is how many variants the class has.
func (c *class) variantCount() int { return len(c.nodeTerms) * (len(c.preferences) + 1) }

// firstVariant is where attempts start: with every preference relaxed when they are ignored.
func (c *class) firstVariant(ignorePreferences bool) int {
	if ignorePreferences {
		return len(c.preferences)
	}
	return 0
}

// nextVariant returns the variant after i, skipping the preference levels that are ignored.
func (c *class) nextVariant(i int, ignorePreferences bool) int {
	i++
	levels := len(c.preferences) + 1
	if ignorePreferences && i%levels != levels-1 {
		i += levels - 1 - i%levels
	}
	return i
}

func (s *solver) variant(c *class, i int) *variant {
	if c.variants == nil {
		c.variants = make([]*variant, c.variantCount())
	}
	if v := c.variants[i]; v != nil {
		return v
	}
	levels := len(c.preferences) + 1
	term, level := i/levels, i%levels
	nt := &c.nodeTerms[term]
	v := &variant{class: c, index: i, term: nt, reqs: nt.reqs.Clone(), spreads: c.spreads, affinity: c.affinity, anti: c.anti}
	nodePreference := false
	for j, p := range c.preferences {
		if j < level {
			v.relaxed = append(v.relaxed, p.desc)
			continue
		}
		switch p.kind {
		case prefNodeAffinity:
			// Preferred node-affinity terms are alternatives: only the heaviest left is enforced.
			if !nodePreference {
				v.reqs.AddAll(p.reqs)
				nodePreference = true
			}
		case prefPodAffinity:
			v.affinity = append(v.affinity[:len(v.affinity):len(v.affinity)], p.term)
		case prefPodAntiAffinity:
			v.anti = append(v.anti[:len(v.anti):len(v.anti)], p.term)
		case prefSpread:
			v.spreads = append(v.spreads[:len(v.spreads):len(v.spreads)], p.spread)
		case prefTaints:
			v.avoidPreferNoS = true
		}
	}
	v.reqsKey = v.reqs.String()
	c.variants[i] = v
	return v
}

func (v *variant) describeRelaxed() string {
	if len(v.relaxed) == 0 {
		return ""
	}
	return "relaxed " + strings.Join(v.relaxed, ", ")
}

// monotonicOnExisting reports whether a node that refuses the variant keeps refusing it for the
// rest of the solve: its resources, host ports and anti-affinity only fill up, and its labels
// and taints do not change. Spread and pod affinity can turn a node acceptable later.
func (v *variant) monotonicOnExisting() bool {
	return len(v.spreads) == 0 && len(v.affinity) == 0
}
