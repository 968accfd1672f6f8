package apivalidation

import (
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// karpv1.RestrictedRequirementKey, which Capstan reads to leave keys off the NodeClaims it makes,
// says of every key what the CRD's validation says: the API server refuses a NodeClaim requirement
// on exactly the keys it names, with its message.
func TestRestrictedRequirementKeyAgreesWithTheCRD(t *testing.T) {
	keys := []string{
		"kubernetes.io/hostname", "kubernetes.io/arch", "kubernetes.io/os", "kubernetes.io/e2e-az-name", "beta.kubernetes.io/os",
		"beta.kubernetes.io/instance-type", "failure-domain.beta.kubernetes.io/zone", "topology.kubernetes.io/zone",
		"topology.kubernetes.io/rack", "node.kubernetes.io/instance-type", "node.kubernetes.io/exclude-from-external-load-balancers",
		"node-restriction.kubernetes.io/team", "node-role.kubernetes.io/control-plane", "notkubernetes.io/x", "kubernetes.io",
		"example.k8s.io/role", "kops.k8s.io/instancegroup", "k8s.io/x", "karpenter.sh/capacity-type", "karpenter.sh/nodepool",
		"karpenter.sh/registered", "team.karpenter.sh/x", "karpenter.k8s.aws/instance-family", "karpenter.k8s.aws/capacity-reservation-id",
		"karpenter.k8s.aws/ami-id", "topology.k8s.aws/zone-id", "example.com/team", "team",
	}
	for i, key := range keys {
		nc := object(t, baseNodeClaim, fmt.Sprintf("spec: {requirements: [{key: %q, operator: DoesNotExist}]}", key), fmt.Sprintf("%s-%d", uniqueName(t), i))
		err := env.Client.Create(t.Context(), nc)
		if err == nil {
			_ = env.Client.Delete(t.Context(), nc)
		}
		switch why := karpv1.RestrictedRequirementKey(key); {
		case why == "" && err != nil:
			t.Errorf("%s: the API server refused it (%v); RestrictedRequirementKey allows it", key, err)
		case why != "" && err == nil:
			t.Errorf("%s: the API server took it; RestrictedRequirementKey says %q", key, why)
		case why != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), why)):
			t.Errorf("%s: the API server said %v; RestrictedRequirementKey says %q", key, err, why)
		}
	}
}
