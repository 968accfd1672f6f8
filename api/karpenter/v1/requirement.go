package v1

import "strings"

// NodeSelectorOperator is a requirement's operator: Kubernetes' node-selector operators plus the
// inclusive comparisons Gte and Lte.
//
// +kubebuilder:validation:Enum=In;NotIn;Exists;DoesNotExist;Gt;Lt;Gte;Lte
type NodeSelectorOperator string

// Requirement operators.
const (
	NodeSelectorOpIn           NodeSelectorOperator = "In"
	NodeSelectorOpNotIn        NodeSelectorOperator = "NotIn"
	NodeSelectorOpExists       NodeSelectorOperator = "Exists"
	NodeSelectorOpDoesNotExist NodeSelectorOperator = "DoesNotExist"
	NodeSelectorOpGt           NodeSelectorOperator = "Gt"
	NodeSelectorOpLt           NodeSelectorOperator = "Lt"
	NodeSelectorOpGte          NodeSelectorOperator = "Gte"
	NodeSelectorOpLte          NodeSelectorOperator = "Lte"
)

// NodeSelectorRequirementWithMinValues is a requirement on a node label, with an optional minimum
// number of distinct values the launch decision must keep open (for example "at least 5
// instance families", so that a spot launch has room to choose).
//
// +kubebuilder:validation:XValidation:rule="self.operator != 'In' || (has(self.values) && size(self.values) > 0)",message="requirements with operator 'In' must have a value defined"
// +kubebuilder:validation:XValidation:rule="!(self.operator in ['Gt', 'Lt', 'Gte', 'Lte']) || (has(self.values) && size(self.values) == 1 && self.values[0].matches('^[0-9]+$'))",message="requirements with operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single non-negative integer value"
// +kubebuilder:validation:XValidation:rule="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",message="requirements with operator 'Exists' or 'DoesNotExist' must not have values"
// +kubebuilder:validation:XValidation:rule="self.operator != 'In' || !has(self.minValues) || (has(self.values) && size(self.values) >= self.minValues)",message="requirements with 'minValues' must have at least that many values specified in the 'values' field"
type NodeSelectorRequirementWithMinValues struct {
	// Key is the label key the requirement applies to.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=316
	// +kubebuilder:validation:Pattern=`^(([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*)/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$`
	// +kubebuilder:validation:XValidation:rule="self != 'kubernetes.io/hostname'",message="label \"kubernetes.io/hostname\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self in ['beta.kubernetes.io/instance-type', 'failure-domain.beta.kubernetes.io/region', 'beta.kubernetes.io/os', 'beta.kubernetes.io/arch', 'failure-domain.beta.kubernetes.io/zone', 'topology.kubernetes.io/zone', 'topology.kubernetes.io/region', 'node.kubernetes.io/instance-type', 'kubernetes.io/arch', 'kubernetes.io/os', 'node.kubernetes.io/windows-build'] || self.find('^([^/]+)').endsWith('node.kubernetes.io') || self.find('^([^/]+)').endsWith('node-restriction.kubernetes.io') || !self.find('^([^/]+)').endsWith('kubernetes.io')",message="label domain \"kubernetes.io\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.find('^([^/]+)').endsWith('kops.k8s.io') || !self.find('^([^/]+)').endsWith('k8s.io')",message="label domain \"k8s.io\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self in ['karpenter.sh/capacity-type', 'karpenter.sh/nodepool'] || !self.find('^([^/]+)').endsWith('karpenter.sh')",message="label domain \"karpenter.sh\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.startsWith('karpenter.k8s.aws/instance-') || self.startsWith('karpenter.k8s.aws/capacity-reservation-') || !self.find('^([^/]+)').endsWith('karpenter.k8s.aws')",message="label domain \"karpenter.k8s.aws\" is restricted"
	Key string `json:"key"`
	// Operator is how the key relates to the values.
	Operator NodeSelectorOperator `json:"operator"`
	// Values are the label values; In and NotIn take a list, Gt, Lt, Gte and Lte one integer.
	// +kubebuilder:validation:MaxItems=1000
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
	// +listType=atomic
	// +optional
	Values []string `json:"values,omitempty"`
	// MinValues is the least number of distinct values of this key a launch must keep among its
	// candidate instance types.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=50
	// +optional
	MinValues *int `json:"minValues,omitempty"`
}

// requirementKeysAllowed are the keys the restricted domains let a requirement name.
var requirementKeysAllowed = map[string]bool{
	"beta.kubernetes.io/instance-type": true, "failure-domain.beta.kubernetes.io/region": true, "beta.kubernetes.io/os": true,
	"beta.kubernetes.io/arch": true, "failure-domain.beta.kubernetes.io/zone": true, "topology.kubernetes.io/zone": true,
	"topology.kubernetes.io/region": true, "node.kubernetes.io/instance-type": true, "kubernetes.io/arch": true, "kubernetes.io/os": true,
	"node.kubernetes.io/windows-build": true, CapacityTypeLabelKey: true, NodePoolLabelKey: true,
}

// RestrictedRequirementKey says why a NodePool's or NodeClaim's requirement may not name key (the
// message of the CRD's validation rule that refuses it), or "" when it may: the Go form of the
// rules on NodeSelectorRequirementWithMinValues.Key.
func RestrictedRequirementKey(key string) string {
	if key == "kubernetes.io/hostname" {
		return `label "kubernetes.io/hostname" is restricted`
	}
	domain, _, _ := strings.Cut(key, "/")
	under := func(d string) bool { return strings.HasSuffix(domain, d) }
	switch {
	case requirementKeysAllowed[key]:
		return ""
	case under("kubernetes.io") && !under("node.kubernetes.io") && !under("node-restriction.kubernetes.io"):
		return `label domain "kubernetes.io" is restricted`
	case under("k8s.io") && !under("kops.k8s.io"):
		return `label domain "k8s.io" is restricted`
	case under("karpenter.sh"):
		return `label domain "karpenter.sh" is restricted`
	case under("karpenter.k8s.aws") && !strings.HasPrefix(key, "karpenter.k8s.aws/instance-") && !strings.HasPrefix(key, "karpenter.k8s.aws/capacity-reservation-"):
		return `label domain "karpenter.k8s.aws" is restricted`
	}
	return ""
}
