// Package v1 holds the karpenter.k8s.aws/v1 API type EC2NodeClass: the AWS launch settings of a
// NodePool's machines (role, AMI, subnet and security-group selectors, metadata options, block
// devices, kubelet settings). It follows Karpenter's public v1 API so that existing manifests keep
// working; the CRD in config/crd is generated from these types by controller-gen.
//
// +kubebuilder:object:generate=true
// +groupName=karpenter.k8s.aws
package v1
