// Package v1 holds the karpenter.sh/v1 API types that Capstan serves: NodePool, a template and
// policy for machines, and NodeClaim, one request for one machine. The types, their defaults and
// their validation follow Karpenter's public v1 API, so that existing manifests keep working; they
// are written here, and the CRDs in config/crd are generated from them by controller-gen.
//
// +kubebuilder:object:generate=true
// +groupName=karpenter.sh
package v1
