// Package nodepools reads NodePools the way Capstan's controllers need them: their requirements
// as a requirement set, the hash of their template that marks NodeClaims for drift, and the
// per-node cost their annotation sets.
package nodepools

import (
	"fmt"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/mitchellh/hashstructure/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// HashVersion is the version of Hash's scheme, the one Karpenter v1 writes ("v3"): a NodeClaim
// whose hash version differs is not compared (a new scheme must not read as drift) but restamped.
// Capstan's releases before this scheme wrote "v2" (their own hash); their claims are restamped.
const HashVersion = "v3"

// Requirements are the template's requirements and labels as one requirement set.
func Requirements(np *karpv1.NodePool) (requirements.Requirements, error) {
	rs, err := FromAPI(np.Spec.Template.Spec.Requirements)
	if err != nil {
		return rs, fmt.Errorf("NodePool %s: %w", np.Name, err)
	}
	for k, v := range np.Spec.Template.ObjectMeta.Labels {
		rs.Add(requirements.Single(k, v))
	}
	return rs, nil
}

// FromAPI converts API requirements, keeping minValues.
func FromAPI(reqs []karpv1.NodeSelectorRequirementWithMinValues) (requirements.Requirements, error) {
	var rs requirements.Requirements
	for _, r := range reqs {
		req, err := requirements.New(r.Key, requirements.Operator(r.Operator), r.Values...)
		if err != nil {
			return rs, err
		}
		if r.MinValues != nil {
			req.MinValues = *r.MinValues
		}
		rs.Add(req)
	}
	return rs, nil
}

// ToAPI converts a requirement set to API requirements, in key order.
func ToAPI(rs requirements.Requirements) []karpv1.NodeSelectorRequirementWithMinValues {
	var out []karpv1.NodeSelectorRequirementWithMinValues
	rs.Each(func(r requirements.Requirement) {
		for i, e := range r.Expressions() {
			api := karpv1.NodeSelectorRequirementWithMinValues{Key: e.Key, Operator: karpv1.NodeSelectorOperator(e.Operator), Values: e.Values}
			if i == 0 && r.MinValues > 0 {
				mv := r.MinValues
				api.MinValues = &mv
			}
			out = append(out, api)
		}
	})
	return out
}

// Hash is the hash of the parts of a NodePool's template that a machine is built from and cannot
// change in place — labels, annotations, taints, startup taints, the NodeClass reference, the
// termination grace period and expireAfter, not the requirements (a machine still satisfying
// changed requirements is not drifted) — and it is the value Karpenter v1 writes under
// HashVersion: hashstructure's FormatV2 over a template of the same shape (type and field names,
// which that format hashes), with slices as sets (the order and repeats of taints do not
// matter), zero values ignored and nil pointers as zero. So NodeClaims that Karpenter stamped
// keep their hash when their NodePool moves to Capstan, and tools that compare the annotations
// read the same values. The test vectors in nodepools_test.go were computed by Karpenter v1.15.0's
// NodePool.Hash (hack/conformance/hashvectors).
func Hash(np *karpv1.NodePool) string {
	// The shape Karpenter's API types give the template. hashstructure hashes each struct's type
	// name and exported field names, so these names are part of the value.
	type ObjectMeta struct {
		Labels      map[string]string
		Annotations map[string]string
	}
	type NodeClassReference struct {
		Kind  string
		Name  string
		Group string
	}
	// Never is a nil duration, as absent is: both are left out of the hash.
	type NillableDuration struct {
		Duration *time.Duration
	}
	type NodeClaimTemplateSpec struct {
		Taints                 []corev1.Taint
		StartupTaints          []corev1.Taint
		NodeClassRef           *NodeClassReference
		TerminationGracePeriod *metav1.Duration
		ExpireAfter            NillableDuration
	}
	type NodeClaimTemplate struct {
		ObjectMeta
		Spec NodeClaimTemplateSpec
	}
	t := np.Spec.Template
	tmpl := NodeClaimTemplate{
		ObjectMeta: ObjectMeta{Labels: t.ObjectMeta.Labels, Annotations: t.ObjectMeta.Annotations},
		Spec: NodeClaimTemplateSpec{
			Taints:                 t.Spec.Taints,
			StartupTaints:          t.Spec.StartupTaints,
			TerminationGracePeriod: t.Spec.TerminationGracePeriod,
			ExpireAfter:            NillableDuration{Duration: t.Spec.ExpireAfter.Duration},
		},
	}
	if r := t.Spec.NodeClassRef; r != nil {
		tmpl.Spec.NodeClassRef = &NodeClassReference{Kind: r.Kind, Name: r.Name, Group: r.Group}
	}
	h, err := hashstructure.Hash(tmpl, hashstructure.FormatV2, &hashstructure.HashOptions{
		SlicesAsSets:    true,
		IgnoreZeroValue: true,
		ZeroNil:         true,
	})
	if err != nil {
		// Only maps, slices, strings, integers and pointers to them: hashing cannot fail.
		panic(fmt.Sprintf("hashing NodePool %s's template: %v", np.Name, err))
	}
	return strconv.FormatUint(h, 10)
}

// ConditionTypeRolledOut is a NodePool's rollout status, written by the nodepool.status
// controller: True (reason RolledOut) when every node of the pool is built from its current
// template and NodeClass, False (reason RollingOut) while some are drifted or being replaced, the
// counts in the message. `kubectl wait nodepool/NAME --for=condition=capstan.dev/RolledOut` and
// GitOps health checks follow a rollout with it. The capstan.dev/ prefix keeps it apart from any
// condition Karpenter may add.
const ConditionTypeRolledOut = "capstan.dev/RolledOut"

// NodeCostAnnotationKey, on a NodePool, is what each of its machines costs per hour beyond its
// instance price (root volume, IP address, per-node licences and agents), in US dollars as a
// decimal ("0.012"). The solver adds it to every machine's price, so that a pool whose nodes
// carry such costs buys fewer, larger machines. Without it the operator's --node-cost applies.
const NodeCostAnnotationKey = "capstan.dev/node-cost"

// NodeCost is the pool's per-node cost: its NodeCostAnnotationKey annotation, else fallback. A
// value that is not a finite, non-negative decimal is an error naming the annotation and value.
func NodeCost(np *karpv1.NodePool, fallback float64) (float64, error) {
	v, ok := np.Annotations[NodeCostAnnotationKey]
	if !ok {
		return fallback, nil
	}
	return ParseNodeCost(v)
}

// ParseNodeCost reads a per-node cost in US dollars per hour.
func ParseNodeCost(v string) (float64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, fmt.Errorf("annotation %s: %q is not a price in US dollars per hour (a non-negative decimal such as \"0.012\")", NodeCostAnnotationKey, v)
	}
	return f, nil
}

// LimitBound is the largest magnitude Bounded keeps: 10^18 (an exabyte of memory, 10^18 CPUs),
// beyond anything a pool can reach and within int64's fast arithmetic.
const LimitBound = 1e18

// Bounded is rl with every quantity of absurd magnitude brought within reach of plain
// arithmetic: above LimitBound (or below -LimitBound) becomes ±LimitBound, and a non-zero value
// too small for a float64 (1e-400) becomes 0. The CRDs admit any exponent ("1e71000100"), and
// resource.Quantity's arithmetic on one takes minutes and gigabytes (comparing 1e71000100 with 1
// took 70 s): a pool limited so is as unlimited as with LimitBound, and as fast. Only the values'
// float approximations are read, which is cheap whatever the exponent. rl is returned as it is
// when nothing needs bounding.
func Bounded(rl corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for k, q := range rl {
		f := q.AsApproximateFloat64()
		var b *resource.Quantity
		switch {
		case f > LimitBound:
			b = resource.NewQuantity(int64(LimitBound), resource.DecimalSI)
		case f < -LimitBound:
			b = resource.NewQuantity(-int64(LimitBound), resource.DecimalSI)
		case f == 0 && !q.IsZero():
			b = resource.NewQuantity(0, resource.DecimalSI)
		default:
			continue
		}
		if out == nil {
			out = maps.Clone(rl)
		}
		out[k] = *b
	}
	if out == nil {
		return rl
	}
	return out
}

// ValidateTemplate checks the template's labels and taints as the kubelet would register its
// node with them: a pool stored before its CRD checked them may hold a value no node can join
// with, and such a value must never reach a machine's boot script. Each error names its field.
func ValidateTemplate(np *karpv1.NodePool) field.ErrorList {
	tmpl := field.NewPath("spec", "template")
	errs := karpv1.ValidateNodeLabels(np.Spec.Template.ObjectMeta.Labels, tmpl.Child("metadata", "labels"))
	errs = append(errs, karpv1.ValidateTaints(np.Spec.Template.Spec.Taints, tmpl.Child("spec", "taints"))...)
	return append(errs, karpv1.ValidateTaints(np.Spec.Template.Spec.StartupTaints, tmpl.Child("spec", "startupTaints"))...)
}

// Validate lists what is wrong with the pool that its CRD does not refuse: its template
// (ValidateTemplate) and its per-node cost annotation. Each problem names its field.
func Validate(np *karpv1.NodePool) []string {
	var out []string
	for _, e := range ValidateTemplate(np) {
		out = append(out, e.Error())
	}
	if _, err := NodeCost(np, 0); err != nil {
		out = append(out, "metadata.annotations: "+err.Error())
	}
	return out
}
