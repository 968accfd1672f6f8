package aws_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// TestIsolatedVPCNeverCallsPricing: with Karpenter's isolatedVPC the Pricing API (which has no
// VPC endpoint) is never called; on-demand offerings carry the embedded catalog's prices.
func TestIsolatedVPCNeverCallsPricing(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	f.Provider = f.NewProvider(t, f.Clients, func(o *aws.Options) { o.IsolatedVPC = true })
	nc, _ := f.Orders(t)
	nc = resolved(t, f, nc)
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f.AWS.Requests("GetProducts")); n != 0 {
		t.Errorf("%d Pricing API calls in an isolated VPC", n)
	}
	price := catalogOnDemand(t)
	if len(its) < 100 {
		t.Fatalf("%d types", len(its))
	}
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.CapacityType == karpv1.CapacityTypeOnDemand && o.Price != price[it.Name] {
				t.Fatalf("%s: on-demand %v, want the catalog's %v", it.Name, o.Price, price[it.Name])
			}
		}
	}
}

// TestReservedENIsLowerPodsAndReachTheNode: with reservedENIs the types' pods are counted
// without those interfaces, and the machine's kubelet is told that maxPods (its image would
// count every ENI), so the Node's pods are what Capstan planned.
func TestReservedENIsLowerPodsAndReachTheNode(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	f.Provider = f.NewProvider(t, f.Clients, func(o *aws.Options) { o.ReservedENIs = 1 })
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		// m6i.large: 3 ENIs of 10 addresses; one reserved leaves 2 × 9 + 2.
		if it.Name == "m6i.large" && it.Capacity.Pods().Value() != 20 {
			t.Errorf("m6i.large pods %v, want 20 with one ENI reserved", it.Capacity.Pods())
		}
	}
	claim := claimFor(nc, np, "reserved-enis", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	claim.Spec.Requirements = append(claim.Spec.Requirements,
		karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m6i.large"}})
	got, _, node := launchAndBoot(t, f, claim)
	if node.Status.Capacity.Pods().Value() != 20 || got.Status.Capacity.Pods().Value() != 20 {
		t.Errorf("Node pods %v, claim's %v: want 20", node.Status.Capacity.Pods(), got.Status.Capacity.Pods())
	}
}

// TestEKSDescribeClusterGivesWhatNodesJoin: Karpenter's eksControlPlane reads the endpoint, CA
// and service CIDR from EKS, through the real SDK.
func TestEKSDescribeClusterGivesWhatNodesJoin(t *testing.T) {
	f := awstest.New(t, env.Client)
	f.AWS.SetEKSCluster(awsfake.EKSCluster{Endpoint: "https://ABC.gr7.us-east-1.eks.amazonaws.com", CABundle: "Q0FCVU5ETEU=", ServiceCIDR: "172.20.0.0/16", Version: "1.37"})
	cl, err := aws.DescribeCluster(context.Background(), f.Clients.EKS, awstest.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Endpoint != "https://ABC.gr7.us-east-1.eks.amazonaws.com" || cl.CABundle != "Q0FCVU5ETEU=" || cl.ServiceCIDR != "172.20.0.0/16" {
		t.Errorf("cluster %+v", cl)
	}
	if _, err := aws.DescribeCluster(context.Background(), f.Clients.EKS, "other"); err == nil {
		t.Error("an unknown cluster was described")
	}
}
