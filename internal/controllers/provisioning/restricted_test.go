package provisioning

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// A pod that keeps off a node by a label the NodeClaim API does not let a requirement name —
// kubernetes.io/hostname NotIn [node-1], a k8s.io or karpenter.sh label DoesNotExist — gets a
// machine: a new machine carries no such label, so the claim leaves the requirement off (the API
// server refused the claim with it, and every pod planned onto it waited).
func TestPodsAvoidingRestrictedLabelsGetAMachine(t *testing.T) {
	np := pool("prov-restricted", nil)
	p, _ := setup(t, np)
	ns := namespace(t)
	avoid := []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-1"}},
		{Key: "example.k8s.io/role", Operator: corev1.NodeSelectorOpDoesNotExist},
		{Key: "team.karpenter.sh/pool", Operator: corev1.NodeSelectorOpDoesNotExist},
	}
	pendingPods(t, ns, "avoid", 1, "500m", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: avoid}}}}}
	})
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	claims := claimsOf(t, "prov-restricted")
	if len(claims) != 1 || len(res.Created) != 1 {
		t.Fatalf("%d claims, %d created: want one for the pod", len(claims), len(res.Created))
	}
	for _, r := range claims[0].Spec.Requirements {
		if why := karpv1.RestrictedRequirementKey(r.Key); why != "" {
			t.Errorf("claim requirement %v: %s", r, why)
		}
	}
}
