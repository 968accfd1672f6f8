package v1

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// TaintEffects are the effects a node's taint may have.
var TaintEffects = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}

// ValidateTaints checks taints as the API server checks a Node's: a key that is a qualified name,
// a value that is a label value (at most 63 characters of letters, digits, '-', '_' and '.',
// starting and ending with a letter or digit), a known effect. The kubelet registers a node with
// these values, so a taint that fails here would keep the node from ever joining; and since
// they are written into a machine's boot script, nothing else may reach it. Each error names its
// field under fldPath (spec.taints[1].value, say).
func ValidateTaints(taints []corev1.Taint, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for i, t := range taints {
		p := fldPath.Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
		}
		if !slices.Contains(TaintEffects, t.Effect) {
			errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, TaintEffects))
		}
	}
	return errs
}

// ValidateNodeLabels checks labels as the API server checks any object's: keys that are
// qualified names, values that are label values. Errors name each label under fldPath
// (spec.template.metadata.labels[team], say), in the keys' order.
func ValidateNodeLabels(labels map[string]string, fldPath *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		errs = append(errs, metav1validation.ValidateLabelName(k, fldPath)...)
		for _, msg := range validation.IsValidLabelValue(labels[k]) {
			errs = append(errs, field.Invalid(fldPath.Key(k), labels[k], msg))
		}
	}
	return errs
}
