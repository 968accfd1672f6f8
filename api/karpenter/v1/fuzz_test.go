package v1_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// longest is the bound the CRDs' duration rules set: Go reads nothing longer (2^63 ns).
const longest = 2562047 * time.Hour

// apiValue is a NodePool field the API server admits by a pattern of the generated CRD.
type apiValue struct {
	path []string
	// wrap puts a value at the field in a NodePool's JSON.
	wrap func(v string) string
	// read is the field's value in a decoded NodePool, as written back to the API server.
	read func(np *karpv1.NodePool) (string, bool)
	// duration: the CRD also has the rule that the value is at most `longest` (or Never).
	duration bool
}

var apiValues = []apiValue{
	{path: []string{"spec", "disruption", "consolidateAfter"}, duration: true,
		wrap: func(v string) string { return `{"spec":{"disruption":{"consolidateAfter":` + v + `}}}` },
		read: func(np *karpv1.NodePool) (string, bool) { return np.Spec.Disruption.ConsolidateAfter.String(), true }},
	{path: []string{"spec", "template", "spec", "expireAfter"}, duration: true,
		wrap: func(v string) string { return `{"spec":{"template":{"spec":{"expireAfter":` + v + `}}}}` },
		read: func(np *karpv1.NodePool) (string, bool) { return np.Spec.Template.Spec.ExpireAfter.String(), true }},
	{path: []string{"spec", "template", "spec", "terminationGracePeriod"}, duration: true,
		wrap: func(v string) string { return `{"spec":{"template":{"spec":{"terminationGracePeriod":` + v + `}}}}` },
		read: func(np *karpv1.NodePool) (string, bool) {
			d := np.Spec.Template.Spec.TerminationGracePeriod
			return marshalled(d), d != nil
		}},
	{path: []string{"spec", "disruption", "budgets", "[]", "duration"}, duration: true,
		wrap: func(v string) string { return `{"spec":{"disruption":{"budgets":[{"duration":` + v + `}]}}}` },
		read: func(np *karpv1.NodePool) (string, bool) {
			d := np.Spec.Disruption.Budgets[0].Duration
			return marshalled(d), d != nil
		}},
	{path: []string{"spec", "limits", "{}"},
		wrap: func(v string) string { return `{"spec":{"limits":{"cpu":` + v + `}}}` },
		read: func(np *karpv1.NodePool) (string, bool) {
			q, ok := np.Spec.Limits["cpu"]
			return marshalled(q), ok
		}},
}

// marshalled is v as its JSON string says it.
func marshalled(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	var s string
	if json.Unmarshal(b, &s) != nil {
		return string(b)
	}
	return s
}

// FuzzNodePoolValues: every duration and quantity the NodePool CRD admits (its patterns — for
// quantities narrowed by hack/crd-patterns.sh —, and for durations its rule against values longer
// than Go reads) decodes into Capstan's types — a value
// that does not would stop every informer listing NodePools — and encodes back to a value the
// same pattern admits and that decodes to the same amount, so an object Capstan writes back is
// accepted and means what it meant.
func FuzzNodePoolValues(f *testing.F) {
	patterns := crdPatterns(f)
	for _, s := range []string{"Never", "0s", "90s", "1h30m", "720h", "2562047h", "2562047h1m", "99999999999s", "1h1h1h",
		"0m", "10m0s", "1000", "1.5", "500m", "4Gi", "1e3", "1E-3", ".5", "+1", "-1", "1e400", "123456789012345678901234567890",
		"1e1.5", "0e0.", "1e20000000000", "1e71000100"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for i, v := range apiValues {
			if !patterns[i].MatchString(s) {
				continue
			}
			if v.duration && s != karpv1.Never {
				if d, err := time.ParseDuration(s); err != nil || d > longest {
					continue // the CRD's rule refuses it (CEL reads durations as Go does)
				}
			}
			raw, _ := json.Marshal(s)
			var np karpv1.NodePool
			if err := json.Unmarshal([]byte(v.wrap(string(raw))), &np); err != nil {
				t.Fatalf("%s: %q is admitted by the CRD but does not decode: %v", strings.Join(v.path, "."), s, err)
			}
			back, ok := v.read(&np)
			if !ok {
				t.Fatalf("%s: %q decoded to no value", strings.Join(v.path, "."), s)
			}
			// A zero budget duration ("0m", "0h") is written "0s" by any Go client, which Karpenter's
			// pattern for it refuses; Capstan keeps that pattern (manifests for Karpenter apply
			// unchanged) and writes NodePools only with patches of what it changed.
			zeroBudget := v.path[len(v.path)-1] == "duration" && back == "0s"
			if !patterns[i].MatchString(back) && !zeroBudget {
				t.Fatalf("%s: %q is written back as %q, which the CRD refuses", strings.Join(v.path, "."), s, back)
			}
			again, _ := json.Marshal(back)
			var np2 karpv1.NodePool
			if err := json.Unmarshal([]byte(v.wrap(string(again))), &np2); err != nil {
				t.Fatalf("%s: %q written back as %q does not decode: %v", strings.Join(v.path, "."), s, back, err)
			}
			if back2, _ := v.read(&np2); back2 != back {
				t.Fatalf("%s: %q → %q → %q", strings.Join(v.path, "."), s, back, back2)
			}
			if v.path[1] == "limits" {
				// Canonical forms, not Cmp: arithmetic on an exponent such as 1e71000100 takes
				// minutes (which is why Capstan bounds limits before using them, nodepools.Bounded).
				q, q2 := np.Spec.Limits["cpu"], np2.Spec.Limits["cpu"]
				if q.String() != q2.String() {
					t.Fatalf("limits.cpu %q reads %s, written back and read again %s", s, q.String(), q2.String())
				}
				if want, err := resource.ParseQuantity(s); err != nil || want.String() != q.String() {
					t.Fatalf("limits.cpu %q reads %s", s, q.String())
				}
			}
		}
	})
}

// crdPatterns are the patterns of apiValues' fields in the generated NodePool CRD; a duration
// field must also carry the rule bounding it.
func crdPatterns(tb testing.TB) []*regexp.Regexp {
	b, err := os.ReadFile("../../../config/crd/karpenter.sh_nodepools.yaml")
	if err != nil {
		tb.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		tb.Fatal(err)
	}
	var out []*regexp.Regexp
	for _, v := range apiValues {
		p := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
		for _, name := range v.path {
			switch name {
			case "[]":
				p = p.Items.Schema
			case "{}":
				p = p.AdditionalProperties.Schema
			default:
				q, ok := p.Properties[name]
				if !ok {
					tb.Fatalf("the CRD has no %s", strings.Join(v.path, "."))
				}
				p = &q
			}
		}
		if p.Pattern == "" {
			tb.Fatalf("%s has no pattern in the CRD", strings.Join(v.path, "."))
		}
		if v.duration && !strings.Contains(ruleText(p), "2562047h") {
			tb.Fatalf("%s has no rule bounding it to 2562047h in the CRD", strings.Join(v.path, "."))
		}
		out = append(out, regexp.MustCompile(p.Pattern))
	}
	return out
}

func ruleText(p *apiextensionsv1.JSONSchemaProps) string {
	var s []string
	for _, r := range p.XValidations {
		s = append(s, r.Rule)
	}
	return strings.Join(s, "\n")
}
