package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodePoolSpec is a template for machines and the policy for buying and removing them.
//
// +kubebuilder:validation:XValidation:rule="has(self.replicas) == has(oldSelf.replicas)",message="Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || !has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits)",message="only 'limits.nodes' is supported on static NodePools"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || !has(self.weight)",message="'weight' is not supported on static NodePools"
type NodePoolSpec struct {
	// Template is the NodeClaim every machine of the pool is made from.
	// +required
	Template NodeClaimTemplate `json:"template"`
	// Disruption says when and how fast the pool's machines may be removed or replaced.
	// +kubebuilder:default:={consolidateAfter: "0s"}
	// +optional
	Disruption Disruption `json:"disruption,omitzero"`
	// Limits cap the total capacity of the pool's machines; Capstan never exceeds them.
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
	// Weight orders NodePools: a higher weight is tried first.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Weight *int32 `json:"weight,omitempty"`
	// Replicas makes the pool static: it keeps this many machines whatever the pending pods,
	// and consolidation does not apply (Karpenter's alpha static capacity; Capstan keeps the
	// count when its StaticCapacity feature gate is on, docs/features.md).
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int64 `json:"replicas,omitempty"`
}

// NodeClaimTemplate is the metadata and spec of a pool's NodeClaims.
type NodeClaimTemplate struct {
	// ObjectMeta holds the labels and annotations put on each NodeClaim and its node.
	// +optional
	ObjectMeta TemplateMetadata `json:"metadata,omitzero"`
	// Spec is the NodeClaim spec.
	// +required
	Spec NodeClaimTemplateSpec `json:"spec"`
}

// TemplateMetadata is the metadata a NodePool puts on its NodeClaims and nodes.
type TemplateMetadata struct {
	// Labels are put on each node. Labels in restricted domains are refused.
	// +kubebuilder:validation:MaxProperties=100
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) <= 316 && k.matches('^(([a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?(\\\\.[a-zA-Z0-9]([-a-zA-Z0-9]*[a-zA-Z0-9])?)*)/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$'))",message="label keys must be qualified names"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'karpenter.sh/nodepool')",message="label \"karpenter.sh/nodepool\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'kubernetes.io/hostname')",message="label \"kubernetes.io/hostname\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k in ['beta.kubernetes.io/instance-type', 'failure-domain.beta.kubernetes.io/region', 'beta.kubernetes.io/os', 'beta.kubernetes.io/arch', 'failure-domain.beta.kubernetes.io/zone', 'topology.kubernetes.io/zone', 'topology.kubernetes.io/region', 'node.kubernetes.io/instance-type', 'kubernetes.io/arch', 'kubernetes.io/os', 'node.kubernetes.io/windows-build'] || k.find('^([^/]+)').endsWith('node.kubernetes.io') || k.find('^([^/]+)').endsWith('node-restriction.kubernetes.io') || !k.find('^([^/]+)').endsWith('kubernetes.io'))",message="label domain \"kubernetes.io\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.find('^([^/]+)').endsWith('kops.k8s.io') || !k.find('^([^/]+)').endsWith('k8s.io'))",message="label domain \"k8s.io\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k == 'karpenter.sh/capacity-type' || !k.find('^([^/]+)').endsWith('karpenter.sh'))",message="label domain \"karpenter.sh\" is restricted"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.find('^([^/]+)').endsWith('karpenter.k8s.aws'))",message="label domain \"karpenter.k8s.aws\" is restricted"
	// +optional
	Labels map[string]string `json:"labels,omitempty"`
	// Annotations are put on each NodeClaim and node.
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// NodeClaimTemplateSpec is a NodeClaim spec without the resources, which are planned per claim.
type NodeClaimTemplateSpec struct {
	// Taints are put on each node at registration and kept.
	// +optional
	Taints Taints `json:"taints,omitempty"`
	// StartupTaints are expected on each node while it starts; pods need not tolerate them.
	// +optional
	StartupTaints Taints `json:"startupTaints,omitempty"`
	// Requirements are the label requirements every machine of the pool satisfies.
	// +kubebuilder:validation:XValidation:rule="self.all(r, r.key != 'karpenter.sh/nodepool')",message="label \"karpenter.sh/nodepool\" is restricted"
	// +optional
	Requirements Requirements `json:"requirements,omitempty"`
	// NodeClassRef names the cloud-specific class of the pool's machines.
	// +kubebuilder:validation:XValidation:rule="self.group == oldSelf.group",message="nodeClassRef.group is immutable"
	// +kubebuilder:validation:XValidation:rule="self.kind == oldSelf.kind",message="nodeClassRef.kind is immutable"
	// +required
	NodeClassRef *NodeClassReference `json:"nodeClassRef"`
	// TerminationGracePeriod is how long a draining node may wait for its pods' disruption rules
	// before they are overridden.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2562047h')",message="must be a duration of at most 2562047h (about 292 years, the longest Go reads)"
	// +optional
	TerminationGracePeriod *metav1.Duration `json:"terminationGracePeriod,omitempty"`
	// ExpireAfter is the age at which a machine is replaced, or Never.
	// +kubebuilder:default:="720h"
	// +optional
	ExpireAfter NillableDuration `json:"expireAfter,omitzero"`
}

// ConsolidationPolicy says which nodes consolidation may remove or replace.
//
// +kubebuilder:validation:Enum=WhenEmpty;WhenEmptyOrUnderutilized;Balanced
type ConsolidationPolicy string

// Consolidation policies.
const (
	ConsolidationPolicyWhenEmpty                ConsolidationPolicy = "WhenEmpty"
	ConsolidationPolicyWhenEmptyOrUnderutilized ConsolidationPolicy = "WhenEmptyOrUnderutilized"
	// ConsolidationPolicyBalanced consolidates under-used nodes only when the saving is worth the
	// disruption; until Capstan's disruption controller scores moves it acts as
	// WhenEmptyOrUnderutilized.
	ConsolidationPolicyBalanced ConsolidationPolicy = "Balanced"
)

// DisruptionReason is why a node is disrupted; budgets can be scoped to reasons.
//
// +kubebuilder:validation:Enum=Underutilized;Empty;Drifted;Unhealthy
type DisruptionReason string

// Disruption reasons.
const (
	DisruptionReasonUnderutilized DisruptionReason = "Underutilized"
	DisruptionReasonEmpty         DisruptionReason = "Empty"
	DisruptionReasonDrifted       DisruptionReason = "Drifted"
	// DisruptionReasonUnhealthy paces node repair (the NodeRepair gate).
	DisruptionReasonUnhealthy DisruptionReason = "Unhealthy"
)

// Disruption is a NodePool's disruption policy.
type Disruption struct {
	// ConsolidateAfter is how long a node must have had no pod scheduled or removed before it may
	// be consolidated, or Never.
	// +kubebuilder:default:="0s"
	// +optional
	ConsolidateAfter NillableDuration `json:"consolidateAfter,omitzero"`
	// ConsolidationPolicy says which nodes may be consolidated.
	// +kubebuilder:default:=WhenEmptyOrUnderutilized
	// +optional
	ConsolidationPolicy ConsolidationPolicy `json:"consolidationPolicy,omitempty"`
	// Budgets cap how many of the pool's nodes may be disrupted at once; the most restrictive
	// active budget wins.
	// +kubebuilder:default:={{nodes: "10%"}}
	// +kubebuilder:validation:MaxItems=50
	// +optional
	Budgets []Budget `json:"budgets,omitempty"`
}

// Budget caps voluntary disruption, optionally only during a schedule and for some reasons.
//
// +kubebuilder:validation:XValidation:rule="has(self.schedule) == has(self.duration)",message="'schedule' must be set with 'duration'"
type Budget struct {
	// Reasons limits the budget to these disruption reasons; empty means all reasons.
	// +kubebuilder:validation:MaxItems=50
	// +optional
	Reasons []DisruptionReason `json:"reasons,omitempty"`
	// Nodes is the number ("5") or percentage ("10%") of the pool's nodes that may be disrupted at
	// once.
	// +kubebuilder:default:="10%"
	// +kubebuilder:validation:Pattern=`^((100|[0-9]{1,2})%|[0-9]+)$`
	// +kubebuilder:validation:MaxLength=10
	// +optional
	Nodes string `json:"nodes,omitempty"`
	// Schedule is a cron expression (UTC) for when the budget starts being active.
	// +kubebuilder:validation:Pattern=`^(@(annually|yearly|monthly|weekly|daily|midnight|hourly)|\S+\s+\S+\s+\S+\s+\S+\s+\S+)$`
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Schedule *string `json:"schedule,omitempty"`
	// Duration is how long the budget stays active after each scheduled start, in hours and
	// minutes.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2562047h')",message="must be a duration of at most 2562047h (about 292 years, the longest Go reads)"
	// +optional
	Duration *metav1.Duration `json:"duration,omitempty"`
}

// NodePoolStatus is what Capstan observed of a pool.
type NodePoolStatus struct {
	// Resources is the summed capacity of the pool's NodeClaims, with "nodes" their count.
	// +optional
	Resources corev1.ResourceList `json:"resources,omitempty"`
	// Nodes is the number of the pool's NodeClaims, 0 when it has none.
	// +kubebuilder:default:=0
	// +optional
	Nodes int64 `json:"nodes"`
	// Spend is, for a pool with a spending limit (spec.limits["capstan.dev/dollars-per-hour"]),
	// what its NodeClaims count against it and the limit, in dollars per hour ("$0.085/h of
	// $0.500/h"); the same figure as status.resources' key, which reads as a quantity ("85m").
	// +optional
	Spend string `json:"spend,omitempty"`
	// NodeClassObservedGeneration is the generation of the pool's NodeClass last seen by Capstan.
	// +optional
	NodeClassObservedGeneration int64 `json:"nodeClassObservedGeneration,omitempty"`
	// Conditions are the pool's conditions (Ready, NodeClassReady, ValidationSucceeded,
	// NodeRegistrationHealthy).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodePool condition types.
const (
	ConditionTypeNodeClassReady      = "NodeClassReady"
	ConditionTypeValidationSucceeded = "ValidationSucceeded"
	// ConditionTypeNodeRegistrationHealthy says whether the pool's recent launches registered
	// nodes: False when they keep failing to launch or register (a misconfiguration to
	// investigate), Unknown after the pool or its NodeClass changed until a launch tells.
	ConditionTypeNodeRegistrationHealthy = "NodeRegistrationHealthy"
)

// NodePool is a template for machines with requirements, limits, a disruption policy and a
// weight. Capstan buys machines from the pools whose templates fit pending pods.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=nodepools,scope=Cluster,categories=karpenter
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.nodes
// +kubebuilder:printcolumn:name="NodeClass",type="string",JSONPath=".spec.template.spec.nodeClassRef.name"
// +kubebuilder:printcolumn:name="Nodes",type="integer",JSONPath=".status.nodes"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Weight",type="integer",JSONPath=".spec.weight",priority=1
// +kubebuilder:printcolumn:name="CPU",type="string",JSONPath=".status.resources.cpu",priority=1
// +kubebuilder:printcolumn:name="Memory",type="string",JSONPath=".status.resources.memory",priority=1
// +kubebuilder:printcolumn:name="Spend",type="string",JSONPath=".status.spend",priority=1
type NodePool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the pool's template and policy.
	// +required
	Spec NodePoolSpec `json:"spec"`
	// Status is the pool observed.
	// +optional
	Status NodePoolStatus `json:"status,omitzero"`
}

// NodePoolList is a list of NodePools.
//
// +kubebuilder:object:root=true
type NodePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodePool `json:"items"`
}
