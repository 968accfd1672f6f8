package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeClaimSpec describes one machine: what it must satisfy and what it is for. It is immutable
// once created.
type NodeClaimSpec struct {
	// Taints are put on the node at registration and kept.
	// +optional
	Taints Taints `json:"taints,omitempty"`
	// StartupTaints are expected on the node while it starts (put there by a daemon that removes
	// them when ready); pods need not tolerate them to be planned for the node.
	// +optional
	StartupTaints Taints `json:"startupTaints,omitempty"`
	// Requirements are the label requirements the machine must satisfy.
	// +required
	Requirements Requirements `json:"requirements"`
	// Resources are the summed requests of the pods the machine was planned for.
	// +optional
	Resources ResourceRequirements `json:"resources,omitzero"`
	// NodeClassRef names the cloud-specific class of the machine.
	// +required
	NodeClassRef *NodeClassReference `json:"nodeClassRef"`
	// TerminationGracePeriod is how long a draining node may wait for its pods' disruption rules
	// (PodDisruptionBudgets, do-not-disrupt) before they are overridden and the node deleted.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2562047h')",message="must be a duration of at most 2562047h (about 292 years, the longest Go reads)"
	// +optional
	TerminationGracePeriod *metav1.Duration `json:"terminationGracePeriod,omitempty"`
	// ExpireAfter is the age at which the machine is replaced, or Never.
	// +kubebuilder:default:="720h"
	// +optional
	ExpireAfter NillableDuration `json:"expireAfter,omitzero"`
}

// Taints is a list of node taints.
//
// +kubebuilder:validation:MaxItems=100
// +kubebuilder:validation:XValidation:rule="self.all(t, t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])",message="taint effect must be one of 'NoSchedule', 'PreferNoSchedule' or 'NoExecute'"
// +kubebuilder:validation:XValidation:rule="self.all(t, size(t.key) > 0)",message="taint key may not be empty"
type Taints []corev1.Taint

// Requirements is a list of label requirements, all of which must hold.
//
// +kubebuilder:validation:MaxItems=100
// +listType=atomic
type Requirements []NodeSelectorRequirementWithMinValues

// ResourceRequirements holds the resources a NodeClaim was planned for.
type ResourceRequirements struct {
	// Requests are the summed resource requests of the planned pods, daemonsets included.
	// +optional
	Requests corev1.ResourceList `json:"requests,omitempty"`
}

// NodeClassReference names a NodeClass: an EC2NodeClass, a SimNodeClass, or another provider's.
type NodeClassReference struct {
	// Group is the API group of the NodeClass.
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="group may not be empty"
	// +kubebuilder:validation:Pattern=`^[^/]*$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	Group string `json:"group"`
	// Kind is the kind of the NodeClass.
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="kind may not be empty"
	// +kubebuilder:validation:MaxLength=63
	// +required
	Kind string `json:"kind"`
	// Name is the name of the NodeClass.
	// +kubebuilder:validation:XValidation:rule="size(self) > 0",message="name may not be empty"
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// NodeClaimStatus is what Capstan observed of the machine.
type NodeClaimStatus struct {
	// NodeName is the name of the Node the machine registered as.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// ProviderID is the cloud's identifier of the machine.
	// +optional
	ProviderID string `json:"providerID,omitempty"`
	// ImageID is the image the machine booted.
	// +optional
	ImageID string `json:"imageID,omitempty"`
	// Capacity is the machine's total resources.
	// +optional
	Capacity corev1.ResourceList `json:"capacity,omitempty"`
	// Allocatable is what pods can use once system overhead is taken.
	// +optional
	Allocatable corev1.ResourceList `json:"allocatable,omitempty"`
	// Conditions are the machine's lifecycle and disruption conditions.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastPodEventTime is when a pod was last bound to or removed from the node; consolidation
	// waits consolidateAfter from it.
	// +optional
	LastPodEventTime metav1.Time `json:"lastPodEventTime,omitzero"`
}

// NodeClaim condition types.
const (
	ConditionTypeLaunched             = "Launched"
	ConditionTypeRegistered           = "Registered"
	ConditionTypeInitialized          = "Initialized"
	ConditionTypeReady                = "Ready"
	ConditionTypeConsolidatable       = "Consolidatable"
	ConditionTypeDrifted              = "Drifted"
	ConditionTypeDrained              = "Drained"
	ConditionTypeVolumesDetached      = "VolumesDetached"
	ConditionTypeInstanceTerminating  = "InstanceTerminating"
	ConditionTypeConsistentStateFound = "ConsistentStateFound"
	ConditionTypeDisruptionReason     = "DisruptionReason"
)

// NodeClaim is a request for one machine. Capstan launches it, waits for its node to register and
// initialize, and deletes the machine when the NodeClaim is deleted.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=nodeclaims,scope=Cluster,categories=karpenter
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Type",type="string",JSONPath=".metadata.labels.node\\.kubernetes\\.io/instance-type"
// +kubebuilder:printcolumn:name="Capacity",type="string",JSONPath=".metadata.labels.karpenter\\.sh/capacity-type"
// +kubebuilder:printcolumn:name="Zone",type="string",JSONPath=".metadata.labels.topology\\.kubernetes\\.io/zone"
// +kubebuilder:printcolumn:name="Node",type="string",JSONPath=".status.nodeName"
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="ImageID",type="string",JSONPath=".status.imageID",priority=1
// +kubebuilder:printcolumn:name="ID",type="string",JSONPath=".status.providerID",priority=1
// +kubebuilder:printcolumn:name="NodePool",type="string",JSONPath=".metadata.labels.karpenter\\.sh/nodepool",priority=1
// +kubebuilder:printcolumn:name="NodeClass",type="string",JSONPath=".spec.nodeClassRef.name",priority=1
// +kubebuilder:printcolumn:name="Drifted",type="string",JSONPath=".status.conditions[?(@.type==\"Drifted\")].status",priority=1
type NodeClaim struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the machine requested. It cannot be changed.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	// +required
	Spec NodeClaimSpec `json:"spec"`
	// Status is the machine observed.
	// +optional
	Status NodeClaimStatus `json:"status,omitzero"`
}

// NodeClaimList is a list of NodeClaims.
//
// +kubebuilder:object:root=true
type NodeClaimList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeClaim `json:"items"`
}
