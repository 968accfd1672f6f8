package provisioning

import (
	"testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Under the BestEffort minValues policy a pod that only two of the pool's three types hold still
// gets a machine: its claim's minValues is lowered to the two types it lists (the API refuses a
// requirement asking for more values than it has, and the pod waited for good) and the claim says
// so (karpenter.sh/nodeclaim-min-values-relaxed: "true").
func TestBestEffortMinValuesRelaxesTheClaim(t *testing.T) {
	minValuesPolicy(t, "prov-mv-besteffort", true)
}

// The same pods under Strict: the big pod is unschedulable, and the claim made keeps minValues 3
// and says it was not relaxed.
func TestStrictMinValuesRelaxesNoClaim(t *testing.T) { minValuesPolicy(t, "prov-mv-strict", false) }

// minValuesPolicy provisions a pod every type of the pool holds and one only two of its three
// types hold, under minValues 3 on instance types, and checks each claim's minValues against its
// annotation: relaxed claims list as many types as their minValues asks, fewer than 3.
func minValuesPolicy(t *testing.T, name string, bestEffort bool) {
	three := 3
	np := pool(name, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
			{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large", "m5.xlarge", "m5.2xlarge"}, MinValues: &three}}
	})
	p, _ := setup(t, np)
	p.SolverOptions.MinValuesBestEffort = bestEffort
	ns := namespace(t)
	pendingPods(t, ns, "small", 1, "500m", nil) // fits all three types
	pendingPods(t, ns, "big", 1, "3", nil)      // fits m5.xlarge and m5.2xlarge only
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	claims := claimsOf(t, name)
	relaxed := 0
	for i := range claims {
		mv, values := instanceTypeMinValues(&claims[i])
		switch claims[i].Annotations[karpv1.NodeClaimMinValuesRelaxedAnnotationKey] {
		case "true":
			relaxed++
			if mv != len(values) || mv >= 3 {
				t.Errorf("relaxed claim %s: minValues %d over %v", claims[i].Name, mv, values)
			}
		case "false":
			if mv != 3 || len(values) < 3 {
				t.Errorf("claim %s not relaxed: minValues %d over %v", claims[i].Name, mv, values)
			}
		default:
			t.Errorf("claim %s: no %s annotation", claims[i].Name, karpv1.NodeClaimMinValuesRelaxedAnnotationKey)
		}
	}
	if bestEffort && relaxed == 0 || !bestEffort && (relaxed != 0 || len(claims) != 1) {
		t.Fatalf("best effort %v: %d relaxed claim(s) of %d", bestEffort, relaxed, len(claims))
	}
}
