package nodepools

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func TestRequirementsIncludeLabelsAndRoundTrip(t *testing.T) {
	mv := 2
	np := &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{
		ObjectMeta: karpv1.TemplateMetadata{Labels: map[string]string{"workload": "orders"}},
		Spec: karpv1.NodeClaimTemplateSpec{Requirements: karpv1.Requirements{
			{Key: "karpenter.k8s.aws/instance-family", Operator: karpv1.NodeSelectorOpIn, Values: []string{"c5", "m5"}, MinValues: &mv},
			{Key: "karpenter.k8s.aws/instance-generation", Operator: karpv1.NodeSelectorOpGt, Values: []string{"4"}},
		}},
	}}}
	rs, err := Requirements(np)
	if err != nil {
		t.Fatal(err)
	}
	if l := rs.Labels(); l["workload"] != "orders" {
		t.Fatalf("labels %v", l)
	}
	back, err := FromAPI(ToAPI(rs))
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != rs.String() {
		t.Fatalf("round trip %q != %q", back.String(), rs.String())
	}
	if r, _ := back.Get("karpenter.k8s.aws/instance-family"); r.MinValues != 2 {
		t.Fatalf("minValues lost: %d", r.MinValues)
	}
}

func TestHashChangesWithTaintsNotRequirements(t *testing.T) {
	np := &karpv1.NodePool{}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"}
	h := Hash(np)
	if Hash(np) != h {
		t.Fatal("hash is not stable")
	}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: "k", Operator: karpv1.NodeSelectorOpExists}}
	if Hash(np) != h {
		t.Fatal("requirements changed the hash")
	}
	np.Spec.Template.Spec.Taints = karpv1.Taints{{Key: "a", Effect: corev1.TaintEffectNoSchedule}}
	if Hash(np) == h {
		t.Fatal("taints did not change the hash")
	}
}

// The hash changes exactly when a machine built from the template would differ, and is blind to
// what Karpenter's is blind to (the order of taints, the requirements).
func TestHashMeaningNotSpelling(t *testing.T) {
	base := func() *karpv1.NodePool {
		np := &karpv1.NodePool{}
		s := &np.Spec.Template.Spec
		s.NodeClassRef = &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"}
		s.Taints = karpv1.Taints{{Key: "a", Effect: corev1.TaintEffectNoSchedule}, {Key: "b", Value: "x", Effect: corev1.TaintEffectNoExecute}}
		s.ExpireAfter = karpv1.NewDuration(720 * time.Hour)
		np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": "a"}
		return np
	}
	h := Hash(base())
	for _, tc := range []struct {
		name   string
		mutate func(*karpv1.NodePool)
		same   bool
	}{
		{"taints reordered", func(np *karpv1.NodePool) {
			ts := np.Spec.Template.Spec.Taints
			ts[0], ts[1] = ts[1], ts[0]
		}, true},
		{"requirements", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: "k", Operator: karpv1.NodeSelectorOpExists}}
		}, true},
		{"expireAfter", func(np *karpv1.NodePool) { np.Spec.Template.Spec.ExpireAfter = karpv1.NewDuration(24 * time.Hour) }, false},
		{"expireAfter Never", func(np *karpv1.NodePool) { np.Spec.Template.Spec.ExpireAfter = karpv1.NeverDuration() }, false},
		{"terminationGracePeriod", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Hour}
		}, false},
		{"a taint's value", func(np *karpv1.NodePool) { np.Spec.Template.Spec.Taints[1].Value = "y" }, false},
		{"a startup taint", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.StartupTaints = karpv1.Taints{{Key: "s", Effect: corev1.TaintEffectNoSchedule}}
		}, false},
		{"a label", func(np *karpv1.NodePool) { np.Spec.Template.ObjectMeta.Labels["team"] = "b" }, false},
		{"an annotation", func(np *karpv1.NodePool) {
			np.Spec.Template.ObjectMeta.Annotations = map[string]string{"example.com/owner": "platform"}
		}, false},
		{"the NodeClass", func(np *karpv1.NodePool) { np.Spec.Template.Spec.NodeClassRef.Name = "other" }, false},
		{"the NodeClass's kind", func(np *karpv1.NodePool) { np.Spec.Template.Spec.NodeClassRef.Kind = "Other" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			np := base()
			tc.mutate(np)
			if got := Hash(np) == h; got != tc.same {
				t.Fatalf("hash unchanged = %v, want %v", got, tc.same)
			}
		})
	}
}

// Capstan's hash is the value Karpenter v1.15.0 writes, so that claims Karpenter stamped keep
// their hash when their pool moves to Capstan: testdata/karpenter-hashes.yaml holds NodePools and
// the hash Karpenter's own NodePool.Hash gave each (hack/conformance/hashvectors), including the
// spellings where Karpenter's hash is not blind (empty maps and lists, a repeated taint, a taint's
// timeAdded) and one where it is (Never and absent).
func TestHashIsKarpentersValue(t *testing.T) {
	b, err := os.ReadFile("testdata/karpenter-hashes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) < 10 {
		t.Fatalf("%d NodePools in the file, want at least 10", len(docs))
	}
	for i, doc := range docs {
		np := &karpv1.NodePool{}
		if err := yaml.UnmarshalStrict([]byte(doc), np); err != nil {
			t.Fatalf("document %d: %v", i+1, err)
		}
		want := np.Annotations[karpv1.NodePoolHashAnnotationKey]
		if want == "" {
			t.Fatalf("NodePool %s has no Karpenter hash", np.Name)
		}
		if got := Hash(np); got != want {
			t.Errorf("NodePool %s: hash %s, Karpenter's %s", np.Name, got, want)
		}
	}
}

func TestNodeCost(t *testing.T) {
	withCost := func(v string) *karpv1.NodePool {
		return &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{NodeCostAnnotationKey: v}}}
	}
	if got, err := NodeCost(&karpv1.NodePool{}, 0.02); err != nil || got != 0.02 {
		t.Fatalf("no annotation: %v, %v; want the fallback 0.02", got, err)
	}
	for v, want := range map[string]float64{"0.012": 0.012, "0": 0, " 1.5 ": 1.5} {
		if got, err := NodeCost(withCost(v), 0.02); err != nil || got != want {
			t.Errorf("annotation %q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"", "cheap", "-0.01", "NaN", "+Inf", "1e400"} {
		_, err := NodeCost(withCost(v), 0)
		if err == nil || !strings.Contains(err.Error(), NodeCostAnnotationKey) || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
			t.Errorf("annotation %q: error %v; want one naming the annotation and the value", v, err)
		}
	}
}
