package solver

import (
	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/requirements"
)

// target is somewhere pods can go: an existing node, or a NodeClaim being planned.
type target struct {
	id       int
	existing *ExistingNode
	pool     *pool

	// labels are an existing node's labels; reqs a planned claim's narrowed requirements.
	labels map[string]string
	reqs   requirements.Requirements

	used vec
	// alloc is an existing node's allocatable, or the most any candidate can hold.
	alloc      vec
	candidates []*itInfo
	// fullAlloc is the most any candidate can hold, before cap; minAlloc the least (per
	// resource): a claim whose pods fit in it needs no candidate ruled out.
	fullAlloc, minAlloc vec
	// reserved is what the claim holds of its pool's limits: the largest candidate capacity.
	reserved vec
	// cap bounds what a claim is filled to: the allocatable of the instance type chosen as its
	// target when it was created, so that claims grow to cost-efficient sizes, not to the largest
	// machine the cloud sells.
	cap vec

	pods   []*corev1.Pod
	ports  []hostPort
	closed bool
	// fixed caches a claim's single-valued topology keys (those any group uses).
	fixed []narrowing
	// openIdx is a claim's position in the solver's open list.
	openIdx int
}

func (t *target) isClaim() bool { return t.existing == nil }

// domain is the target's value for a topology key, if it has exactly one.
func (t *target) domain(key string) (string, bool) {
	if !t.isClaim() {
		v, ok := t.labels[key]
		return v, ok
	}
	if t.fixed != nil {
		for _, n := range t.fixed {
			if n.key == key {
				return n.value, true
			}
		}
		return "", false
	}
	r, ok := t.reqs.Get(key)
	if !ok || !r.IsFinite() || len(r.Values()) != 1 {
		return "", false
	}
	return r.Values()[0], true
}

// refreshFixed recomputes the cache of single-valued topology keys after the claim narrowed.
func (t *target) refreshFixed(keys []string) {
	t.fixed = t.fixed[:0]
	if t.fixed == nil {
		t.fixed = make([]narrowing, 0, len(keys))
	}
	for _, k := range keys {
		if r, ok := t.reqs.Get(k); ok && r.IsFinite() && len(r.Values()) == 1 {
			t.fixed = append(t.fixed, narrowing{key: k, value: r.Values()[0]})
		}
	}
}

func (t *target) portsFree(ports []hostPort) bool { return portsFreeOf(ports, t.ports) }

// portsFreeOf reports whether no port of a conflicts with one of b.
func portsFreeOf(a, b []hostPort) bool {
	for i := range a {
		for j := range b {
			if a[i].conflicts(b[j]) {
				return false
			}
		}
	}
	return true
}

// setCandidates replaces a claim's candidates and recomputes its capacity bound and reservation,
// returning to the pool what the claim no longer needs.
func (t *target) setCandidates(c []*itInfo) {
	if t.minAlloc != nil && len(c) == len(t.candidates) && (len(c) == 0 || &c[0] == &t.candidates[0]) {
		// The same candidates (a join that ruled none out): bounds and reservation stand, but a
		// co-located pod may have grown the claim past its cap.
		if t.cap != nil && !t.used.lessEq(t.cap) {
			t.cap = nil
			copy(t.alloc, t.fullAlloc)
		}
		return
	}
	t.candidates = c
	for i := range t.alloc {
		t.alloc[i] = 0
	}
	if t.minAlloc == nil {
		t.minAlloc = make(vec, len(t.alloc))
	}
	for i, info := range c {
		t.alloc.maxInto(info.alloc)
		if i == 0 {
			copy(t.minAlloc, info.alloc)
		} else {
			t.minAlloc.minInto(info.alloc)
		}
	}
	t.fullAlloc = append(t.fullAlloc[:0], t.alloc...)
	if t.cap != nil && !t.used.lessEq(t.cap) {
		// A co-located pod grew the claim past the size it was filled to.
		t.cap = nil
	}
	if t.cap != nil {
		for i := range t.alloc {
			t.alloc[i] = min(t.alloc[i], t.cap[i])
		}
	}
	if !t.pool.capped() {
		return
	}
	reserve := make(vec, len(t.alloc))
	for _, info := range c {
		reserve.maxInto(info.capacity)
	}
	t.pool.release(t.reserved, reserve)
	t.reserved = reserve
}
