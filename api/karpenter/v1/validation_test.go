package v1

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidateTaintsNamesEachBadField(t *testing.T) {
	taints := []corev1.Taint{
		{Key: "example.com/gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule},
		{Key: "workload", Value: "x';touch /tmp/p;'", Effect: corev1.TaintEffectNoExecute},
		{Key: "a b", Effect: corev1.TaintEffectPreferNoSchedule},
		{Key: "ok", Value: "", Effect: "Sometimes"},
		{Key: "Example.com/upper-prefix", Effect: corev1.TaintEffectNoSchedule},
		{Key: "v", Value: strings.Repeat("a", 64), Effect: corev1.TaintEffectNoSchedule},
	}
	errs := ValidateTaints(taints, field.NewPath("spec", "taints"))
	var got []string
	for _, e := range errs {
		got = append(got, e.Field)
	}
	want := []string{"spec.taints[1].value", "spec.taints[2].key", "spec.taints[3].effect", "spec.taints[4].key", "spec.taints[5].value"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("errors on %q, want %q (%v)", got, want, errs)
	}
}

func TestValidateNodeLabelsNamesEachBadLabel(t *testing.T) {
	errs := ValidateNodeLabels(map[string]string{"team": "web", "tier": "$(id)", "bad key": "x", "empty": ""}, field.NewPath("metadata", "labels"))
	if len(errs) != 2 || errs[0].Field != "metadata.labels" || errs[0].BadValue != "bad key" || errs[1].Field != "metadata.labels[tier]" {
		t.Fatalf("errors %v; want the key \"bad key\", then metadata.labels[tier]", errs)
	}
}
