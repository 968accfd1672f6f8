package requirements

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestRequirementAllows(t *testing.T) {
	tests := []struct {
		name       string
		r          Requirement
		allowed    []string
		disallowed []string
		absentOK   bool
	}{
		{"In", MustNew("k", In, "a", "b"), []string{"a", "b"}, []string{"c", ""}, false},
		{"NotIn", MustNew("k", NotIn, "a"), []string{"b", "zzz"}, []string{"a"}, true},
		{"Exists", MustNew("k", Exists), []string{"a", "1"}, nil, false},
		{"DoesNotExist", MustNew("k", DoesNotExist), nil, []string{"a"}, true},
		{"Gt", MustNew("k", Gt, "5"), []string{"6", "100"}, []string{"5", "4", "x"}, false},
		{"Gte", MustNew("k", Gte, "5"), []string{"5", "6"}, []string{"4"}, false},
		{"Lt", MustNew("k", Lt, "5"), []string{"4", "0", "-3"}, []string{"5", "x"}, false},
		{"Lte", MustNew("k", Lte, "5"), []string{"5"}, []string{"6"}, false},
	}
	for _, tc := range tests {
		for _, v := range tc.allowed {
			if !tc.r.Allows(v) {
				t.Errorf("%s: %q not allowed", tc.name, v)
			}
		}
		for _, v := range tc.disallowed {
			if tc.r.Allows(v) {
				t.Errorf("%s: %q allowed", tc.name, v)
			}
		}
		if tc.r.AllowsAbsent() != tc.absentOK {
			t.Errorf("%s: AllowsAbsent = %v", tc.name, tc.r.AllowsAbsent())
		}
	}
}

func TestRequirementIntersects(t *testing.T) {
	tests := []struct {
		a, b Requirement
		want bool
	}{
		{MustNew("k", In, "a", "b"), MustNew("k", In, "b", "c"), true},
		{MustNew("k", In, "a"), MustNew("k", In, "b"), false},
		{MustNew("k", In, "a"), MustNew("k", NotIn, "a"), false},
		{MustNew("k", In, "a", "b"), MustNew("k", NotIn, "a"), true},
		{MustNew("k", NotIn, "a"), MustNew("k", NotIn, "b"), true},
		{MustNew("k", Exists), MustNew("k", DoesNotExist), false},
		{MustNew("k", NotIn, "a"), MustNew("k", DoesNotExist), true},
		{MustNew("k", DoesNotExist), MustNew("k", DoesNotExist), true},
		{MustNew("k", In, "a"), MustNew("k", DoesNotExist), false},
		{MustNew("k", Gt, "4"), MustNew("k", Lt, "6"), true},
		{MustNew("k", Gt, "4"), MustNew("k", Lt, "5"), false},
		{MustNew("k", Gte, "5"), MustNew("k", Lte, "5"), true},
		{MustNew("k", Gt, "4"), MustNew("k", In, "3", "8"), true},
		{MustNew("k", Gt, "4"), MustNew("k", In, "3", "x"), false},
		{MustNew("k", Lt, "4"), MustNew("k", NotIn, "1", "2"), true},
	}
	for _, tc := range tests {
		if got := tc.a.Intersects(&tc.b); got != tc.want {
			t.Errorf("%s ∩ %s: got %v, want %v", tc.a.String(), tc.b.String(), got, tc.want)
		}
		if got := tc.b.Intersects(&tc.a); got != tc.want {
			t.Errorf("%s ∩ %s (reversed): got %v, want %v", tc.b.String(), tc.a.String(), got, tc.want)
		}
	}
}

// Intersects answers without building the intersection; it must agree with Intersect().Empty()
// on every combination of operators, values and bounds.
func TestIntersectsAgreesWithIntersect(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	values := []string{"1", "2", "3", "5", "8", "a", "b"}
	random := func() Requirement {
		ops := []Operator{In, NotIn, Exists, DoesNotExist, Gt, Lt, Gte, Lte}
		op := ops[r.IntN(len(ops))]
		switch op {
		case Exists, DoesNotExist:
			return MustNew("k", op)
		case Gt, Lt, Gte, Lte:
			return MustNew("k", op, strconv.Itoa(r.IntN(10)))
		}
		var vs []string
		for range 1 + r.IntN(4) {
			vs = append(vs, values[r.IntN(len(values))])
		}
		return MustNew("k", op, vs...)
	}
	for range 5000 {
		a, b := random(), random()
		// Narrow further sometimes, so that bounds and value sets meet in one requirement.
		if r.IntN(2) == 0 {
			c := random()
			a = a.Intersect(&c)
		}
		want := a.Intersect(&b)
		if got := a.Intersects(&b); got != !want.Empty() {
			t.Fatalf("%s ∩ %s: Intersects %v, but the intersection is %s", a.String(), b.String(), got, want.String())
		}
	}
}

// Intersects looks a short list up in a long one (an instance type's name against a claim's
// sixty candidates); that path must agree with the intersection too, bounds included.
func TestIntersectsAgreesWithIntersectOnListsOfDifferentLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	list := func(n int) []string {
		var vs []string
		for range n {
			vs = append(vs, strconv.Itoa(r.IntN(200)))
		}
		return vs
	}
	looked := 0
	for range 5000 {
		short := MustNew("k", In, list(1+r.IntN(2))...)
		long := MustNew("k", In, list(20+r.IntN(60))...)
		if r.IntN(3) == 0 {
			bound := MustNew("k", Gt, strconv.Itoa(r.IntN(200)))
			long = long.Intersect(&bound)
		}
		a, b := short, long
		if r.IntN(2) == 0 {
			a, b = long, short
		}
		if min(a.Len(), b.Len())*8 < max(a.Len(), b.Len()) {
			looked++
		}
		want := a.Intersect(&b)
		if got := a.Intersects(&b); got != !want.Empty() {
			t.Fatalf("%s ∩ %s: Intersects %v, but the intersection is %s", a.String(), b.String(), got, want.String())
		}
	}
	if looked < 1000 {
		t.Fatalf("only %d of 5000 cases took the look-up path", looked)
	}
}

// Equal is what the solver uses to skip re-filtering a claim's candidates on a key a pod did not
// narrow: equal requirements must allow the same, a requirement intersected with itself must stay
// equal, and one narrowed to fewer values must not be.
func TestEqualMeansUnchanged(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	values := []string{"1", "2", "3", "5", "8", "a", "b"}
	ops := []Operator{In, NotIn, Exists, DoesNotExist, Gt, Lt}
	random := func() Requirement {
		op := ops[r.IntN(len(ops))]
		switch op {
		case Exists, DoesNotExist:
			return MustNew("k", op)
		case Gt, Lt:
			return MustNew("k", op, strconv.Itoa(r.IntN(10)))
		}
		return MustNew("k", op, values[r.IntN(len(values))], values[r.IntN(len(values))])
	}
	equal := 0
	for range 5000 {
		a, b := random(), random()
		if self := a.Intersect(&a); !a.Equal(&self) {
			t.Fatalf("%s ∩ itself = %s, not Equal", a.String(), self.String())
		}
		if !a.Equal(&b) {
			if a.IsFinite() && len(a.Values()) > 1 {
				one := Single("k", a.Values()[0])
				if narrowed := a.Intersect(&one); a.Equal(&narrowed) {
					t.Fatalf("%s narrowed to %s counts as Equal", a.String(), narrowed.String())
				}
			}
			continue
		}
		equal++
		if a.AllowsAbsent() != b.AllowsAbsent() {
			t.Fatalf("%s and %s are Equal but differ on absence", a.String(), b.String())
		}
		for _, v := range values {
			if a.Allows(v) != b.Allows(v) {
				t.Fatalf("%s and %s are Equal but differ on %q", a.String(), b.String(), v)
			}
		}
	}
	if equal == 0 {
		t.Fatal("no two random requirements were Equal: the test checked nothing")
	}
}

func TestIntersectNarrows(t *testing.T) {
	a := MustNew("k", In, "a", "b", "c")
	b := MustNew("k", NotIn, "b")
	x := a.Intersect(&b)
	if got := x.Values(); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Fatalf("In [a b c] ∩ NotIn [b] = %v", got)
	}
	g := MustNew("n", Gt, "2")
	in := MustNew("n", In, "1", "2", "3", "10")
	y := g.Intersect(&in)
	if got := y.Values(); len(got) != 2 || got[0] != "10" || got[1] != "3" {
		t.Fatalf("Gt 2 ∩ In [1 2 3 10] = %v", got)
	}
	m := MustNew("k", In, "a", "b")
	m.MinValues = 2
	z := m.Intersect(&a)
	if z.MinValues != 2 {
		t.Fatalf("minValues lost in intersection: %d", z.MinValues)
	}
}

func TestRequirementsCompatible(t *testing.T) {
	node := Requirements{}
	node.Add(MustNew("kubernetes.io/arch", In, "amd64"))
	node.Add(MustNew("team", In, "a"))
	wellKnown := func(k string) bool { return k == "topology.kubernetes.io/zone" }

	tests := []struct {
		name string
		pod  []Requirement
		ok   bool
	}{
		{"same arch", []Requirement{MustNew("kubernetes.io/arch", In, "amd64", "arm64")}, true},
		{"other arch", []Requirement{MustNew("kubernetes.io/arch", In, "arm64")}, false},
		{"undefined custom label required", []Requirement{MustNew("gpu", In, "true")}, false},
		{"undefined custom label excluded", []Requirement{MustNew("gpu", NotIn, "true")}, true},
		{"undefined custom label absent", []Requirement{MustNew("gpu", DoesNotExist)}, true},
		{"undefined well-known label", []Requirement{MustNew("topology.kubernetes.io/zone", In, "a")}, true},
		{"defined label must not exist", []Requirement{MustNew("team", DoesNotExist)}, false},
	}
	for _, tc := range tests {
		var pod Requirements
		for _, r := range tc.pod {
			pod.Add(r)
		}
		err := node.Compatible(pod, wellKnown)
		if (err == nil) != tc.ok {
			t.Errorf("%s: Compatible = %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}

func TestRequirementsSatisfied(t *testing.T) {
	var rs Requirements
	rs.Add(MustNew("zone", In, "a", "b"))
	rs.Add(MustNew("gpu", DoesNotExist))
	rs.Add(MustNew("cpu", Gte, "4"))
	tests := []struct {
		labels map[string]string
		ok     bool
	}{
		{map[string]string{"zone": "a", "cpu": "4"}, true},
		{map[string]string{"zone": "c", "cpu": "4"}, false},
		{map[string]string{"zone": "a", "cpu": "4", "gpu": "1"}, false},
		{map[string]string{"zone": "a", "cpu": "2"}, false},
		{map[string]string{"zone": "a"}, false},
	}
	for _, tc := range tests {
		if _, ok := rs.Satisfied(tc.labels); ok != tc.ok {
			t.Errorf("%v: Satisfied = %v, want %v", tc.labels, ok, tc.ok)
		}
	}
}

func TestLabelsAreTheSingleValuedKeys(t *testing.T) {
	var rs Requirements
	rs.Add(MustNew("zone", In, "a", "b"))
	rs.Add(MustNew("zone", In, "b", "c"))
	rs.Add(MustNew("arch", In, "amd64", "arm64"))
	l := rs.Labels()
	if len(l) != 1 || l["zone"] != "b" {
		t.Fatalf("Labels = %v, want zone=b only", l)
	}
}

func TestExpressionsRoundTrip(t *testing.T) {
	for _, r := range []Requirement{
		MustNew("k", In, "b", "a"), MustNew("k", NotIn, "a"), MustNew("k", Exists), MustNew("k", DoesNotExist),
		MustNew("k", Gt, "3"), MustNew("k", Lte, "9"),
	} {
		var back Requirements
		for _, e := range r.Expressions() {
			back.Add(MustNew(e.Key, e.Operator, e.Values...))
		}
		got, _ := back.Get("k")
		for _, v := range []string{"a", "b", "c", "2", "3", "4", "9", "10"} {
			if got.Allows(v) != r.Allows(v) {
				t.Errorf("%s: %q allowed %v after round trip, %v before", r.String(), v, got.Allows(v), r.Allows(v))
			}
		}
		if got.AllowsAbsent() != r.AllowsAbsent() {
			t.Errorf("%s: absence changed in round trip", r.String())
		}
	}
}

// Overlaps must say exactly what Intersects says, for sets of requirements on shared and
// unshared keys.
func TestOverlapsAgreesWithIntersects(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	keys := []string{"a", "b", "c"}
	values := []string{"1", "2", "3", "x"}
	ops := []Operator{In, NotIn, Exists, DoesNotExist, Gt, Lt}
	random := func() Requirements {
		rs := Requirements{}
		for _, k := range keys {
			if r.IntN(2) == 0 {
				continue
			}
			op := ops[r.IntN(len(ops))]
			switch op {
			case Exists, DoesNotExist:
				rs.Add(MustNew(k, op))
			case Gt, Lt:
				rs.Add(MustNew(k, op, strconv.Itoa(r.IntN(4))))
			default:
				rs.Add(MustNew(k, op, values[r.IntN(len(values))], values[r.IntN(len(values))]))
			}
		}
		return rs
	}
	overlapping, conflicting := 0, 0
	for range 5000 {
		a, b := random(), random()
		want := a.Intersects(b) == nil
		if got := a.Overlaps(b); got != want {
			t.Fatalf("%s vs %s: Overlaps %v, Intersects %v", a.String(), b.String(), got, want)
		}
		if want {
			overlapping++
		} else {
			conflicting++
		}
	}
	if overlapping == 0 || conflicting == 0 {
		t.Fatalf("random sets were %d overlapping and %d conflicting: the test checks one side only", overlapping, conflicting)
	}
}

// Pin narrows a key to one value and drops its minValues; other keys keep theirs.
func TestPinNarrowsAndDropsMinValues(t *testing.T) {
	types := MustNew("type", In, "a", "b", "c")
	types.MinValues = 2
	zones := MustNew("zone", In, "z1", "z2")
	zones.MinValues = 2
	var rs Requirements
	rs.Add(types)
	rs.Add(zones)
	rs.Pin("type", "b")
	got, _ := rs.Get("type")
	if !got.Allows("b") || got.Allows("a") || got.MinValues != 0 {
		t.Fatalf("pinned: %v, minValues %d; want In [b] without minValues", got, got.MinValues)
	}
	if z, _ := rs.Get("zone"); z.MinValues != 2 {
		t.Fatalf("another key's minValues: %d, want 2", z.MinValues)
	}
	rs.Pin("type", "a")
	if got, _ := rs.Get("type"); got.Allows("a") || got.Allows("b") {
		t.Fatalf("pinned again to another value: %v, want nothing allowed", got)
	}
}
