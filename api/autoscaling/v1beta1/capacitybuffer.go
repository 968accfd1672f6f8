package v1beta1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ActiveCapacity is the provisioning strategy that keeps the buffer's room provisioned: its
// chunks are planned as pods that must have a place. It is the default, and the only strategy
// Capstan acts on.
const ActiveCapacity = "buffer.x-k8s.io/active-capacity"

// Condition types of a CapacityBuffer.
const (
	// ConditionReadyForProvisioning says whether the buffer's chunk shape and count resolved.
	ConditionReadyForProvisioning = "ReadyForProvisioning"
	// ConditionProvisioning says whether the buffer's chunks have room now.
	ConditionProvisioning = "Provisioning"
)

// CapacityBuffer asks an autoscaler to keep room for a number of chunks, each the shape of a pod
// template, so that pods that come later start without waiting for a machine.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=capacitybuffers,scope=Namespaced,shortName=cb,categories=autoscaling
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Strategy",type="string",JSONPath=".spec.provisioningStrategy",description="The provisioning strategy."
// +kubebuilder:printcolumn:name="PodTemplate",type="string",JSONPath=".status.podTemplateRef.name",description="The PodTemplate of a chunk."
// +kubebuilder:printcolumn:name="Replicas",type="integer",JSONPath=".status.replicas",description="The chunks to keep room for."
// +kubebuilder:printcolumn:name="ConditionsType",type="string",JSONPath=".status.conditions[*].type",description="The condition types."
// +kubebuilder:printcolumn:name="ConditionsStatus",type="string",JSONPath=".status.conditions[*].status",description="The condition statuses."
// +kubebuilder:printcolumn:name="ConditionsReason",type="string",JSONPath=".status.conditions[*].reason",description="The condition reasons."
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp",description="The buffer's age."
type CapacityBuffer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the room asked for.
	// +required
	Spec CapacityBufferSpec `json:"spec"`
	// Status is what was resolved and provisioned.
	// +optional
	Status CapacityBufferStatus `json:"status,omitempty"`
}

// LocalObjectRef names an object in the buffer's namespace.
type LocalObjectRef struct {
	// Name is the object's name.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// ScalableRef names an object with a scale subresource in the buffer's namespace.
type ScalableRef struct {
	// APIGroup is the object's API group; empty is the core group.
	// +optional
	APIGroup string `json:"apiGroup,omitempty"`
	// Kind is the object's kind.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Name is the object's name.
	// +kubebuilder:validation:Required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
}

// CapacityBufferSpec is the room a buffer asks for: chunks of a pod template's shape, counted
// by replicas, by a percentage of a scalable object's replicas, or by resource limits.
//
// +kubebuilder:validation:XValidation:rule="!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",message="If podTemplateRef is set, replicas or limits must also be set"
// +kubebuilder:validation:XValidation:rule="!(has(self.podTemplateRef) && has(self.scalableRef))",message="You must define either PodTemplateRef or ScalableRef, but not both"
type CapacityBufferSpec struct {
	// ProvisioningStrategy is how the buffer is used; buffer.x-k8s.io/active-capacity keeps its
	// chunks provisioned.
	// +kubebuilder:default="buffer.x-k8s.io/active-capacity"
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`
	// PodTemplateRef names the PodTemplate a chunk has the shape of. One of podTemplateRef and
	// scalableRef.
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`
	// ScalableRef names a workload (Deployment, ReplicaSet, StatefulSet) whose pod template a
	// chunk has the shape of. One of podTemplateRef and scalableRef.
	// +optional
	ScalableRef *ScalableRef `json:"scalableRef,omitempty"`
	// Replicas is how many chunks to keep room for. With percentage, the larger of the two;
	// limits bound both.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Percentage is the chunks as a percentage of the scalableRef's replicas, rounded up (at
	// least 1). Only with scalableRef.
	// +kubebuilder:validation:Minimum=0
	// +optional
	Percentage *int32 `json:"percentage,omitempty"`
	// Limits bound the chunks by their summed requests; alone, as many chunks as fit in them.
	// +optional
	Limits corev1.ResourceList `json:"limits,omitempty"`
}

// CapacityBufferStatus is what the buffer resolved to and whether its room is provisioned.
type CapacityBufferStatus struct {
	// PodTemplateRef is the PodTemplate of a chunk (a podTemplateRef's own).
	// +optional
	PodTemplateRef *LocalObjectRef `json:"podTemplateRef,omitempty"`
	// Replicas is how many chunks the buffer keeps room for.
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// PodTemplateGeneration is the generation of the template the chunks were resolved from.
	// +optional
	PodTemplateGeneration *int64 `json:"podTemplateGeneration,omitempty"`
	// Conditions are ReadyForProvisioning and Provisioning.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ProvisioningStrategy is the strategy in effect.
	// +optional
	ProvisioningStrategy *string `json:"provisioningStrategy,omitempty"`
}

// CapacityBufferList is a list of CapacityBuffers.
//
// +kubebuilder:object:root=true
type CapacityBufferList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CapacityBuffer `json:"items"`
}
