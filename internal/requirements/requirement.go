package requirements

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Requirement is the set of values one label key may take on a node, and whether the label may be
// absent. Values are either listed (allowed = values) or complemented (allowed = everything but
// values); integer bounds further restrict the allowed values to integers in (greaterThan,
// lessThan).
type Requirement struct {
	Key string
	// complement means values lists what is excluded rather than what is allowed.
	complement bool
	// values is sorted and without duplicates.
	values []string
	// absentOK means a node without the label satisfies the requirement.
	absentOK bool
	// greaterThan and lessThan are exclusive integer bounds; math.MinInt64/MaxInt64 when unset.
	greaterThan, lessThan int64
	// MinValues is the least number of distinct values a launch must keep open, or 0.
	MinValues int
}

// Operator is a requirement operator.
type Operator string

// Operators.
const (
	In           Operator = "In"
	NotIn        Operator = "NotIn"
	Exists       Operator = "Exists"
	DoesNotExist Operator = "DoesNotExist"
	Gt           Operator = "Gt"
	Lt           Operator = "Lt"
	Gte          Operator = "Gte"
	Lte          Operator = "Lte"
)

func unbounded(key string) Requirement {
	return Requirement{Key: key, greaterThan: math.MinInt64, lessThan: math.MaxInt64}
}

// New returns the requirement `key op values`. Gt, Lt, Gte and Lte take one integer value.
func New(key string, op Operator, values ...string) (Requirement, error) {
	r := unbounded(key)
	switch op {
	case In:
		r.values = sortedUnique(values)
	case NotIn:
		r.complement, r.absentOK, r.values = true, true, sortedUnique(values)
	case Exists:
		r.complement = true
	case DoesNotExist:
		r.absentOK = true
	case Gt, Lt, Gte, Lte:
		if len(values) != 1 {
			return r, fmt.Errorf("requirement %s %s needs exactly one integer value, got %d", key, op, len(values))
		}
		n, err := strconv.ParseInt(values[0], 10, 64)
		if err != nil {
			return r, fmt.Errorf("requirement %s %s %q: value is not an integer", key, op, values[0])
		}
		r.complement = true
		switch op {
		case Gt:
			r.greaterThan = n
		case Gte:
			r.greaterThan = n - 1
		case Lt:
			r.lessThan = n
		case Lte:
			r.lessThan = n + 1
		}
	default:
		return r, fmt.Errorf("requirement %s: unknown operator %q", key, op)
	}
	return r, nil
}

// MustNew is New for constants and tests; it panics on error.
func MustNew(key string, op Operator, values ...string) Requirement {
	r, err := New(key, op, values...)
	if err != nil {
		panic(err)
	}
	return r
}

// Single returns the requirement `key In [value]`.
func Single(key, value string) Requirement {
	r := unbounded(key)
	r.values = []string{value}
	return r
}

func sortedUnique(values []string) []string {
	out := slices.Clone(values)
	slices.Sort(out)
	return slices.Compact(out)
}

func (r *Requirement) bounded() bool {
	return r.greaterThan != math.MinInt64 || r.lessThan != math.MaxInt64
}

func (r *Requirement) inBounds(v string) bool {
	if !r.bounded() {
		return true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	return err == nil && n > r.greaterThan && n < r.lessThan
}

// Allows reports whether the label value v satisfies the requirement.
func (r *Requirement) Allows(v string) bool {
	_, found := slices.BinarySearch(r.values, v)
	if found == r.complement {
		return false
	}
	return r.inBounds(v)
}

// AllowsAbsent reports whether a node without the label satisfies the requirement.
func (r *Requirement) AllowsAbsent() bool { return r.absentOK }

// IsFinite reports whether the allowed values are a finite list (In, or In narrowed).
func (r *Requirement) IsFinite() bool { return !r.complement }

// Values returns the allowed values when the requirement is finite, sorted; else the excluded
// values.
func (r *Requirement) Values() []string { return r.values }

// Len is the number of allowed values of a finite requirement, or math.MaxInt for an infinite one.
func (r *Requirement) Len() int {
	if r.complement {
		return math.MaxInt
	}
	return len(r.values)
}

// Any returns an allowed value: the first of a finite requirement, or "" when none is listed.
func (r *Requirement) Any() string {
	if !r.complement && len(r.values) > 0 {
		return r.values[0]
	}
	if r.complement && r.bounded() && r.greaterThan < math.MaxInt64-1 {
		return strconv.FormatInt(r.greaterThan+1, 10)
	}
	return ""
}

// Intersect returns the values both requirements allow.
func (r *Requirement) Intersect(o *Requirement) Requirement {
	out := Requirement{
		Key:         r.Key,
		absentOK:    r.absentOK && o.absentOK,
		greaterThan: max(r.greaterThan, o.greaterThan),
		lessThan:    min(r.lessThan, o.lessThan),
		MinValues:   max(r.MinValues, o.MinValues),
	}
	switch {
	case !r.complement && !o.complement:
		out.values = intersectSorted(r.values, o.values)
	case !r.complement:
		out.values = subtractSorted(r.values, o.values)
	case !o.complement:
		out.values = subtractSorted(o.values, r.values)
	default:
		out.complement = true
		out.values = unionSorted(r.values, o.values)
	}
	if !out.complement && out.bounded() {
		kept := out.values[:0:0]
		for _, v := range out.values {
			if out.inBounds(v) {
				kept = append(kept, v)
			}
		}
		out.values = kept
	}
	return out
}

// Equal reports whether the requirements are the same: same key, values, bounds, absence and
// minValues.
func (r *Requirement) Equal(o *Requirement) bool {
	return r.Key == o.Key && r.complement == o.complement && r.absentOK == o.absentOK &&
		r.greaterThan == o.greaterThan && r.lessThan == o.lessThan && r.MinValues == o.MinValues &&
		slices.Equal(r.values, o.values)
}

// Empty reports whether no node can satisfy the requirement: no value is allowed and the label may
// not be absent.
func (r *Requirement) Empty() bool {
	if r.absentOK {
		return false
	}
	if r.complement {
		return r.bounded() && r.greaterThan >= r.lessThan-1
	}
	return len(r.values) == 0
}

// Intersects reports whether some node can satisfy both requirements.
func (r *Requirement) Intersects(o *Requirement) bool {
	if r.absentOK && o.absentOK {
		return true
	}
	// Intersect(o).Empty() without building the intersection (this runs per instance type for
	// every claim a solve opens).
	bounds := Requirement{greaterThan: max(r.greaterThan, o.greaterThan), lessThan: min(r.lessThan, o.lessThan)}
	switch {
	case !r.complement && !o.complement:
		// A short list against a long one (one instance type's name against a claim's sixty):
		// look each short value up rather than walk both.
		if small, large := shorterFirst(r.values, o.values); len(small)*8 < len(large) {
			for _, v := range small {
				if _, found := slices.BinarySearch(large, v); found && bounds.inBounds(v) {
					return true
				}
			}
			return false
		}
		i, j := 0, 0
		for i < len(r.values) && j < len(o.values) {
			switch a, b := r.values[i], o.values[j]; {
			case a == b:
				if bounds.inBounds(a) {
					return true
				}
				i++
				j++
			case a < b:
				i++
			default:
				j++
			}
		}
		return false
	case !r.complement:
		return anyAllowed(r.values, o.values, &bounds)
	case !o.complement:
		return anyAllowed(o.values, r.values, &bounds)
	default:
		return !bounds.bounded() || bounds.greaterThan < bounds.lessThan-1
	}
}

func shorterFirst(a, b []string) ([]string, []string) {
	if len(a) <= len(b) {
		return a, b
	}
	return b, a
}

// anyAllowed reports whether some value of in is not in out and within bounds (both sorted).
func anyAllowed(in, out []string, bounds *Requirement) bool {
	for _, v := range in {
		if _, found := slices.BinarySearch(out, v); !found && bounds.inBounds(v) {
			return true
		}
	}
	return false
}

// String renders the requirement as a person reads it ("zone In [a b]", "gpu DoesNotExist").
func (r *Requirement) String() string {
	var parts []string
	switch {
	case !r.complement && len(r.values) == 0 && r.absentOK:
		return r.Key + " DoesNotExist"
	case !r.complement:
		parts = append(parts, fmt.Sprintf("%s In [%s]", r.Key, strings.Join(r.values, " ")))
	case len(r.values) > 0:
		parts = append(parts, fmt.Sprintf("%s NotIn [%s]", r.Key, strings.Join(r.values, " ")))
	case !r.bounded() && !r.absentOK:
		parts = append(parts, r.Key+" Exists")
	}
	if r.complement && r.greaterThan != math.MinInt64 {
		parts = append(parts, fmt.Sprintf("%s Gt %d", r.Key, r.greaterThan))
	}
	if r.complement && r.lessThan != math.MaxInt64 {
		parts = append(parts, fmt.Sprintf("%s Lt %d", r.Key, r.lessThan))
	}
	if len(parts) == 0 {
		return r.Key + " (any)"
	}
	return strings.Join(parts, ", ")
}

func intersectSorted(a, b []string) []string {
	var out []string
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			out = append(out, a[i])
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	return out
}

func subtractSorted(a, b []string) []string {
	var out []string
	j := 0
	for _, v := range a {
		for j < len(b) && b[j] < v {
			j++
		}
		if j < len(b) && b[j] == v {
			continue
		}
		out = append(out, v)
	}
	return out
}

func unionSorted(a, b []string) []string {
	out := make([]string, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j >= len(b) || (i < len(a) && a[i] < b[j]):
			out = append(out, a[i])
			i++
		case i >= len(a) || b[j] < a[i]:
			out = append(out, b[j])
			j++
		default:
			out = append(out, a[i])
			i++
			j++
		}
	}
	return out
}

// Expression is one node-selector expression.
type Expression struct {
	Key      string
	Operator Operator
	Values   []string
}

// Expressions renders the requirement as the node-selector expressions that express it: In for a
// finite set, NotIn, Exists or DoesNotExist otherwise, plus Gt/Lt for integer bounds.
func (r *Requirement) Expressions() []Expression {
	var out []Expression
	switch {
	case !r.complement && len(r.values) == 0 && r.absentOK:
		return []Expression{{Key: r.Key, Operator: DoesNotExist}}
	case !r.complement:
		return []Expression{{Key: r.Key, Operator: In, Values: r.values}}
	case len(r.values) > 0:
		out = append(out, Expression{Key: r.Key, Operator: NotIn, Values: r.values})
	case !r.bounded():
		out = append(out, Expression{Key: r.Key, Operator: Exists})
	}
	if r.greaterThan != math.MinInt64 {
		out = append(out, Expression{Key: r.Key, Operator: Gt, Values: []string{strconv.FormatInt(r.greaterThan, 10)}})
	}
	if r.lessThan != math.MaxInt64 {
		out = append(out, Expression{Key: r.Key, Operator: Lt, Values: []string{strconv.FormatInt(r.lessThan, 10)}})
	}
	return out
}
