package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
)

// ProvisioningRequest is the deprecated v1beta1 version of autoscaling.x-k8s.io/v1
// ProvisioningRequest, served so that manifests written for it apply and a CRD that Cluster
// Autoscaler installed with objects stored as v1beta1 can be taken over without migrating them.
// Its schema is v1's (the two versions have one schema in SIG Autoscaling's API), so the API
// server converts between them by their apiVersion alone; Capstan reads and writes v1.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=provisioningrequests,scope=Namespaced,shortName=provreq;provreqs
// +kubebuilder:subresource:status
// +kubebuilder:deprecatedversion:warning="autoscaling.x-k8s.io/v1beta1 ProvisioningRequest is deprecated; use autoscaling.x-k8s.io/v1"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type ProvisioningRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the capacity asked for; it is immutable.
	// +required
	Spec autoscalingv1.ProvisioningRequestSpec `json:"spec"`
	// Status is the autoscaler's answer.
	// +optional
	Status autoscalingv1.ProvisioningRequestStatus `json:"status,omitempty"`
}

// ProvisioningRequestList is a list of ProvisioningRequests.
//
// +kubebuilder:object:root=true
type ProvisioningRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProvisioningRequest `json:"items"`
}
