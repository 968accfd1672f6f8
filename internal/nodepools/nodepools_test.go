package nodepools

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

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
