package awsfake

import (
	"net/http"
)

// EKSCluster is what the EKS endpoint describes of the cluster (Options.ClusterName).
type EKSCluster struct {
	Endpoint, CABundle, ServiceCIDR, Version string
}

// eks answers DescribeCluster for the server's cluster (REST-JSON).
func (s *Server) eks(w http.ResponseWriter, action, name string) {
	if action != "DescribeCluster" {
		s.writeError(w, "eks", Fault{Code: "InvalidRequestException", Message: "unsupported EKS call", Status: http.StatusBadRequest})
		return
	}
	s.mu.Lock()
	c := s.eksCluster
	s.mu.Unlock()
	if name != s.cluster {
		s.writeError(w, "eks", Fault{Code: "ResourceNotFoundException", Message: "No cluster found for name: " + name + ".", Status: http.StatusNotFound})
		return
	}
	writeJSON(w, "application/json", map[string]any{"cluster": map[string]any{
		"name": s.cluster, "arn": "arn:aws:eks:" + s.region + ":" + s.account + ":cluster/" + s.cluster, "status": "ACTIVE",
		"version": c.Version, "endpoint": c.Endpoint, "certificateAuthority": map[string]string{"data": c.CABundle},
		"kubernetesNetworkConfig": map[string]string{"serviceIpv4Cidr": c.ServiceCIDR, "ipFamily": "ipv4"},
	}})
}

// SetEKSCluster sets what DescribeCluster answers.
func (s *Server) SetEKSCluster(c EKSCluster) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eksCluster = c
}
