package requirements

import (
	"strings"
	"testing"
)

var fuzzOps = []Operator{In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte}

// FuzzRequirementAlgebra checks the algebra on any two requirements of one key and any label
// value: the intersection is commutative, allows exactly the values both sides allow (never one
// either side rejects), allows absence exactly when both do, and Intersects never denies what a
// value both allow proves.
func FuzzRequirementAlgebra(f *testing.F) {
	f.Add(uint8(0), "a,b,c", uint8(1), "b", "a")
	f.Add(uint8(4), "3", uint8(5), "7", "5")
	f.Add(uint8(6), "3", uint8(1), "3,4", "4")
	f.Add(uint8(2), "", uint8(0), "x", "x")
	f.Add(uint8(4), "1", uint8(1), "2", "2")
	f.Add(uint8(7), "-9223372036854775808", uint8(6), "9223372036854775807", "0")
	f.Fuzz(func(t *testing.T, opA uint8, valsA string, opB uint8, valsB string, v string) {
		a, err := New("k", fuzzOps[int(opA)%len(fuzzOps)], split(valsA)...)
		if err != nil {
			return
		}
		b, err := New("k", fuzzOps[int(opB)%len(fuzzOps)], split(valsB)...)
		if err != nil {
			return
		}
		ab, ba := a.Intersect(&b), b.Intersect(&a)
		if !ab.Equal(&ba) {
			t.Fatalf("%s ∩ %s = %s, but the other way %s", a.String(), b.String(), ab.String(), ba.String())
		}
		both := a.Allows(v) && b.Allows(v)
		if ab.Allows(v) != both {
			t.Fatalf("%s ∩ %s = %s allows %q: %v; %s: %v, %s: %v", a.String(), b.String(), ab.String(), v, ab.Allows(v), a.String(), a.Allows(v), b.String(), b.Allows(v))
		}
		if ab.AllowsAbsent() != (a.AllowsAbsent() && b.AllowsAbsent()) {
			t.Fatalf("%s ∩ %s = %s allows absence: %v", a.String(), b.String(), ab.String(), ab.AllowsAbsent())
		}
		if both && (!a.Intersects(&b) || ab.Empty()) {
			t.Fatalf("%s and %s both allow %q, but Intersects says %v and the intersection %s is empty: %v", a.String(), b.String(), v, a.Intersects(&b), ab.String(), ab.Empty())
		}
		if a.Intersects(&b) != b.Intersects(&a) {
			t.Fatalf("Intersects of %s and %s is not symmetric", a.String(), b.String())
		}
	})
}

// split reads a comma-separated list; "" is no values.
func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}
