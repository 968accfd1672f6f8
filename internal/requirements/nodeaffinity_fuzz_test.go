package requirements

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// k8sOps are the node-selector operators Kubernetes has. Karpenter's Gte and Lte (and minValues,
// which counts instance types, not labels) have no Kubernetes counterpart, so they are left out:
// FuzzRequirementAlgebra checks them against the algebra alone.
var k8sOps = []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists,
	corev1.NodeSelectorOpDoesNotExist, corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt}

// fuzzValues are the values requirements and labels draw from: integers (for Gt and Lt) and not.
var fuzzValues = []string{"1", "2", "10", "-3", "x", "007"}

// FuzzAgreesWithTheKubeScheduler runs random node-selector terms (up to four requirements on two
// keys) and node labels through internal/requirements (FromNodeSelector, then Satisfied) and
// through the kube-scheduler's own matcher (component-helpers' nodeaffinity): they agree on every
// term both accept. A term either refuses (Gt with two values, In with none) is skipped, and so is
// the empty term (Kubernetes: no node; requirements: no constraint).
func FuzzAgreesWithTheKubeScheduler(f *testing.F) {
	f.Add([]byte{0, 0, 1, 2}, uint8(0b0101), uint8(0), uint8(4))
	f.Add([]byte{4, 1, 0, 1}, uint8(0b1111), uint8(2), uint8(1))
	f.Add([]byte{1, 0, 4, 0, 3, 1}, uint8(0b0001), uint8(5), uint8(0))
	f.Fuzz(func(t *testing.T, spec []byte, present, va, vb uint8) {
		var nsrs []corev1.NodeSelectorRequirement
		for i := 0; i+1 < len(spec) && len(nsrs) < 4; i += 2 {
			op := k8sOps[int(spec[i])%len(k8sOps)]
			key := []string{"a", "b"}[int(spec[i+1]>>7)]
			r := corev1.NodeSelectorRequirement{Key: key, Operator: op}
			switch op {
			case corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn:
				for j, v := range fuzzValues {
					if spec[i+1]&(1<<j) != 0 {
						r.Values = append(r.Values, v)
					}
				}
			case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
				r.Values = []string{fuzzValues[int(spec[i+1]&0x7f)%len(fuzzValues)]}
			}
			nsrs = append(nsrs, r)
		}
		if len(nsrs) == 0 {
			// An empty term selects no node in Kubernetes; empty requirements are no constraint
			// (a pod without a selector): the one difference by construction.
			return
		}
		labels := map[string]string{}
		if present&1 != 0 {
			labels["a"] = fuzzValues[int(va)%len(fuzzValues)]
		}
		if present&2 != 0 {
			labels["b"] = fuzzValues[int(vb)%len(fuzzValues)]
		}
		k8s, err := nodeaffinity.NewNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: nsrs}}})
		if err != nil {
			return
		}
		ours, err := FromNodeSelector(nsrs)
		if err != nil {
			return
		}
		want := k8s.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}})
		if _, got := ours.Satisfied(labels); got != want {
			t.Fatalf("term %v on labels %v: requirements say %v (%s), the kube-scheduler %v", nsrs, labels, got, ours.String(), want)
		}
	})
}
