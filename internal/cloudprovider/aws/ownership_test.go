package aws_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// TestForgedClaimsCannotTerminateAnothersMachine: before terminating, the machine's own tags are
// checked. A NodeClaim forged with another cluster's instance as provider ID, and one of pool
// "orders" whose provider ID was edited to point at another pool's machine (or another claim's),
// get a NotOwnedError and nothing is terminated; the claim's own machine still terminates.
func TestForgedClaimsCannotTerminateAnothersMachine(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	run := func(tags map[string]string) awsfake.Instance {
		return f.AWS.RunInstance(awsfake.Instance{Type: "m6i.large", Zone: "us-east-1a", ZoneID: "use1-az1", SubnetID: "subnet-01aaaaaaaaaaaaaaa",
			ImageID: nc.Status.AMIs[0].ID, Tags: tags})
	}
	otherCluster := run(map[string]string{"kubernetes.io/cluster/payments": "owned", karpv1.NodePoolLabelKey: "orders", aws.NodeClaimTag: "forged"})
	otherPool := run(map[string]string{"kubernetes.io/cluster/" + awstest.Cluster: "owned", karpv1.NodePoolLabelKey: "batch", aws.NodeClaimTag: "forged"})
	otherClaim := run(map[string]string{"kubernetes.io/cluster/" + awstest.Cluster: "owned", karpv1.NodePoolLabelKey: "orders", aws.NodeClaimTag: "someone-else"})
	for _, inst := range []awsfake.Instance{otherCluster, otherPool, otherClaim} {
		forged := claimFor(nc, np, "forged", nil)
		forged.Status.ProviderID = inst.ProviderID()
		err := f.Provider.CheckOwnership(ctx, forged)
		if !cloudprovider.IsNotOwned(err) {
			t.Errorf("%v: CheckOwnership %v, want NotOwned", inst.Tags, err)
		}
		if err := f.Provider.Delete(ctx, forged); !cloudprovider.IsNotOwned(err) {
			t.Errorf("%v: Delete %v, want NotOwned", inst.Tags, err)
		}
		t.Logf("refused: %v", err)
	}
	if n := len(f.AWS.Requests("TerminateInstances")); n != 0 {
		t.Fatalf("%d TerminateInstances calls for machines that are not the claim's", n)
	}
	// The claim's own machine passes and terminates.
	claim := claimFor(nc, np, "genuine", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	got, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.ProviderID = got.Status.ProviderID
	if err := f.Provider.CheckOwnership(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := f.Provider.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if n := len(f.AWS.Requests("TerminateInstances")); n != 1 || len(f.AWS.LiveInstances(aws.NodeClaimTag, "genuine")) != 0 {
		t.Errorf("%d TerminateInstances calls, want the claim's own machine terminated", n)
	}
}
