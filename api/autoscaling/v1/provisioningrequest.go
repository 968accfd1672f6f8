package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Provisioning classes Capstan answers.
const (
	// ClassCheckCapacity asks whether the pods fit on the cluster's machines now; nothing is
	// bought.
	ClassCheckCapacity = "check-capacity.autoscaling.x-k8s.io"
	// ClassBestEffortAtomicScaleUp asks for the machines all the pods need, all of them or none.
	ClassBestEffortAtomicScaleUp = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
)

// Condition types of a ProvisioningRequest.
const (
	// ConditionAccepted says the request's class is one the autoscaler answers.
	ConditionAccepted = "Accepted"
	// ConditionProvisioned says the capacity is there (True) or not yet (False, with why).
	ConditionProvisioned = "Provisioned"
	// ConditionFailed says the request will not be provisioned.
	ConditionFailed = "Failed"
	// ConditionBookingExpired says the capacity, once provisioned, is no longer kept for the
	// request's pods.
	ConditionBookingExpired = "BookingExpired"
	// ConditionCapacityRevoked says the provisioned capacity is gone.
	ConditionCapacityRevoked = "CapacityRevoked"
)

// Annotations of the pods that consume a request.
const (
	// ConsumeAnnotationKey names, on a pod, the request (of the pod's namespace) whose capacity
	// the pod runs on.
	ConsumeAnnotationKey = "autoscaling.x-k8s.io/consume-provisioning-request"
	// ClassAnnotationKey names, on a pod, the class of the request it consumes.
	ClassAnnotationKey = "autoscaling.x-k8s.io/provisioning-class-name"
	// LegacyConsumeAnnotationKey is Cluster Autoscaler's older name of ConsumeAnnotationKey.
	LegacyConsumeAnnotationKey = "cluster-autoscaler.kubernetes.io/consume-provisioning-request"
)

// ParameterValidUntilSeconds is the best-effort atomic class's parameter: for how many seconds
// after its creation the request is tried before it fails.
const ParameterValidUntilSeconds = "ValidUntilSeconds"

// ProvisioningRequest asks for capacity for groups of pods described by PodTemplates.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=provisioningrequests,scope=Namespaced,shortName=provreq;provreqs
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ProvisioningRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the capacity asked for; it is immutable.
	// +required
	Spec ProvisioningRequestSpec `json:"spec"`
	// Status is the autoscaler's answer.
	// +optional
	Status ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestSpec is the pods capacity is asked for, and how.
type ProvisioningRequestSpec struct {
	// PodSets are the groups of pods.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +required
	PodSets []PodSet `json:"podSets"`
	// ProvisioningClassName is how the capacity is provided (ClassCheckCapacity,
	// ClassBestEffortAtomicScaleUp, or a class of another autoscaler).
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +required
	ProvisioningClassName string `json:"provisioningClassName"`
	// Parameters are the class's settings.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="Value is immutable"
	// +kubebuilder:validation:MaxProperties=100
	// +optional
	Parameters map[string]Parameter `json:"parameters,omitempty"`
}

// Parameter is a class's setting.
// +kubebuilder:validation:MaxLength=255
type Parameter string

// PodSet is a number of pods of one PodTemplate.
type PodSet struct {
	// PodTemplateRef names the PodTemplate (in the request's namespace) the pods are made from.
	// +required
	PodTemplateRef Reference `json:"podTemplateRef"`
	// Count is how many pods.
	// +kubebuilder:validation:Minimum=1
	// +required
	Count int32 `json:"count"`
}

// Reference names an object of the request's namespace.
type Reference struct {
	// Name is the object's name.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`
}

// ProvisioningRequestStatus is the autoscaler's answer.
type ProvisioningRequestStatus struct {
	// Conditions are Accepted, Provisioned, Failed, BookingExpired and CapacityRevoked.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ProvisioningClassDetails are the class's further answers.
	// +kubebuilder:validation:MaxProperties=64
	// +optional
	ProvisioningClassDetails map[string]Detail `json:"provisioningClassDetails,omitempty"`
}

// Detail is a class's further answer.
// +kubebuilder:validation:MaxLength=32768
type Detail string

// ProvisioningRequestList is a list of ProvisioningRequests.
//
// +kubebuilder:object:root=true
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningRequest `json:"items"`
}
