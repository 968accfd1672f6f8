package operator

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/awsfake"
)

// What nodes join is Karpenter's: the API server URL set, or EKS DescribeCluster's when it is not
// (read through the real SDK against the local EKS endpoint); with eksControlPlane the CA bundle
// and service CIDR from EKS too; a call that fails stops the start, naming the setting.
func TestJoinSettingsComeFromEKSWhereNotSet(t *testing.T) {
	srv, err := awsfake.New(awsfake.Options{ClusterName: "prod-east"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	clients, err := aws.NewClients(context.Background(), aws.ClientOptions{Region: srv.Region(), EndpointURL: srv.URL(), MaxAttempts: 1,
		ConfigOptions: []func(*config.LoadOptions) error{config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("AKIDLOCAL", "secret", ""))}})
	if err != nil {
		t.Fatal(err)
	}
	const eksURL = "https://ABC.gr7.us-east-1.eks.amazonaws.com"
	srv.SetEKSCluster(awsfake.EKSCluster{Endpoint: eksURL, CABundle: "Q0FCVU5ETEU=", ServiceCIDR: "172.20.0.0/16", Version: "1.37"})
	for _, tc := range []struct {
		name                       string
		o                          Options
		endpoint, ca, cidr, errSay string
	}{
		{name: "set", o: Options{ClusterName: "prod-east", ClusterEndpoint: "https://api.example"}, endpoint: "https://api.example"},
		{name: "not set: EKS's, as Karpenter", o: Options{ClusterName: "prod-east"}, endpoint: eksURL},
		{name: "eksControlPlane", o: Options{ClusterName: "prod-east", EKSControlPlane: true}, endpoint: eksURL, ca: "Q0FCVU5ETEU=", cidr: "172.20.0.0/16"},
		{name: "eksControlPlane, endpoint and CA set", o: Options{ClusterName: "prod-east", EKSControlPlane: true, ClusterEndpoint: "https://api.example", ClusterCABundle: "T1dO"},
			endpoint: "https://api.example", ca: "T1dO", cidr: "172.20.0.0/16"},
		{name: "not set, no such cluster", o: Options{ClusterName: "other"}, errSay: "--cluster-endpoint (CLUSTER_ENDPOINT) is not set"},
		{name: "eksControlPlane, no such cluster", o: Options{ClusterName: "other", EKSControlPlane: true}, errSay: "--eks-control-plane (EKS_CONTROL_PLANE)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			endpoint, ca, cidr, err := joinSettings(clients.EKS, tc.o)
			if tc.errSay != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errSay) {
					t.Fatalf("error %v, want one saying %q", err, tc.errSay)
				}
				return
			}
			if err != nil || endpoint != tc.endpoint || ca != tc.ca || cidr != tc.cidr {
				t.Errorf("endpoint %q, CA %q, CIDR %q, error %v; want %q, %q, %q", endpoint, ca, cidr, err, tc.endpoint, tc.ca, tc.cidr)
			}
		})
	}
	srv.SetEKSCluster(awsfake.EKSCluster{})
	if _, _, _, err := joinSettings(clients.EKS, Options{ClusterName: "prod-east"}); err == nil || !strings.Contains(err.Error(), "has no endpoint") {
		t.Errorf("an EKS answer without an endpoint: error %v", err)
	}
}
