package requirements

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Requirements are requirements on several keys, all of which must hold. The zero value is
// usable and requires nothing.
type Requirements struct {
	m map[string]Requirement
}

// IncompatibleError says why two requirement sets cannot be satisfied by one node.
type IncompatibleError struct {
	Key    string
	Reason string
}

func (e *IncompatibleError) Error() string { return e.Reason }

// FromLabels returns requirements that each label key has its value.
func FromLabels(labels map[string]string) Requirements {
	var rs Requirements
	for k, v := range labels {
		rs.Add(Single(k, v))
	}
	return rs
}

// FromNodeSelector converts Kubernetes node-selector requirements.
func FromNodeSelector(nsrs []corev1.NodeSelectorRequirement) (Requirements, error) {
	var rs Requirements
	for _, nsr := range nsrs {
		r, err := New(nsr.Key, Operator(nsr.Operator), nsr.Values...)
		if err != nil {
			return rs, err
		}
		rs.Add(r)
	}
	return rs, nil
}

// Clone returns an independent copy.
func (rs Requirements) Clone() Requirements {
	if rs.m == nil {
		return Requirements{}
	}
	out := Requirements{m: make(map[string]Requirement, len(rs.m))}
	for k, v := range rs.m {
		out.m[k] = v
	}
	return out
}

// Add intersects r into the set.
func (rs *Requirements) Add(r Requirement) {
	if rs.m == nil {
		rs.m = map[string]Requirement{}
	}
	if cur, ok := rs.m[r.Key]; ok {
		r = cur.Intersect(&r)
	}
	rs.m[r.Key] = r
}

// Pin narrows key to the one value: the requirement becomes its intersection with key In [value],
// with no minValues (one value is all a pinned key keeps open — a claim pinned to a capacity
// reservation's type and zone — and an API requirement whose minValues exceeds its values is
// invalid).
func (rs *Requirements) Pin(key, value string) {
	rs.Add(Single(key, value))
	r := rs.m[key]
	r.MinValues = 0
	rs.m[key] = r
}

// Set puts r in the set in place of any requirement of its key.
func (rs *Requirements) Set(r Requirement) {
	if rs.m == nil {
		rs.m = map[string]Requirement{}
	}
	rs.m[r.Key] = r
}

// AddAll intersects every requirement of o into the set.
func (rs *Requirements) AddAll(o Requirements) {
	for _, r := range o.m {
		rs.Add(r)
	}
}

// Get returns the requirement on key, if any.
func (rs Requirements) Get(key string) (Requirement, bool) {
	r, ok := rs.m[key]
	return r, ok
}

// Has reports whether the set constrains key.
func (rs Requirements) Has(key string) bool {
	_, ok := rs.m[key]
	return ok
}

// Len is the number of constrained keys.
func (rs Requirements) Len() int { return len(rs.m) }

// Keys returns the constrained keys, sorted.
func (rs Requirements) Keys() []string {
	keys := make([]string, 0, len(rs.m))
	for k := range rs.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Each calls f for every requirement in key order.
func (rs Requirements) Each(f func(Requirement)) {
	for _, k := range rs.Keys() {
		f(rs.m[k])
	}
}

// Empty reports whether some key cannot be satisfied at all.
func (rs Requirements) Empty() bool {
	for _, r := range rs.m {
		if r.Empty() {
			return true
		}
	}
	return false
}

// Overlaps reports whether Intersects finds no conflict, without building its error: for loops
// that try many instance types against one claim.
func (rs Requirements) Overlaps(o Requirements) bool {
	small, large := rs, o
	if len(small.m) > len(large.m) {
		small, large = large, small
	}
	for k, a := range small.m {
		if b, ok := large.m[k]; ok && !a.Intersects(&b) {
			return false
		}
	}
	return true
}

// Intersects returns an error naming a key on which rs and o allow no common value; keys only
// one of them constrains are not checked.
func (rs Requirements) Intersects(o Requirements) error {
	small, large := rs, o
	if len(small.m) > len(large.m) {
		small, large = large, small
	}
	for k, a := range small.m {
		b, ok := large.m[k]
		if !ok {
			continue
		}
		if !a.Intersects(&b) {
			x, y := rs.m[k], o.m[k]
			return &IncompatibleError{Key: k, Reason: fmt.Sprintf("%s not compatible with %s", y.String(), x.String())}
		}
	}
	return nil
}

// Compatible returns an error when a node described by rs cannot satisfy o: a key of o that rs
// does not define must allow the label to be absent, unless undefinedOK(key) (labels the cloud
// provider resolves, such as zone or instance type); shared keys must intersect.
func (rs Requirements) Compatible(o Requirements, undefinedOK func(string) bool) error {
	for k, r := range o.m {
		if _, ok := rs.m[k]; ok || r.absentOK || (undefinedOK != nil && undefinedOK(k)) {
			continue
		}
		return &IncompatibleError{Key: k, Reason: fmt.Sprintf("label %q is not set by the node (requires %s)", k, r.String())}
	}
	return rs.Intersects(o)
}

// Satisfied reports whether a node with these labels satisfies every requirement, and if not,
// returns the first failing one.
func (rs Requirements) Satisfied(labels map[string]string) (Requirement, bool) {
	for _, k := range rs.Keys() {
		r := rs.m[k]
		v, ok := labels[k]
		if ok && !r.Allows(v) || !ok && !r.absentOK {
			return r, false
		}
	}
	return Requirement{}, true
}

// Labels returns the keys that have exactly one allowed value, with that value: the labels a
// node of these requirements will certainly have.
func (rs Requirements) Labels() map[string]string {
	out := map[string]string{}
	for k, r := range rs.m {
		if !r.complement && len(r.values) == 1 {
			out[k] = r.values[0]
		}
	}
	return out
}

// String renders the set in key order.
func (rs Requirements) String() string {
	parts := make([]string, 0, len(rs.m))
	rs.Each(func(r Requirement) { parts = append(parts, r.String()) })
	return strings.Join(parts, ", ")
}
