package aws

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"capstan.dev/capstan/internal/cloudprovider"
)

// Tags an instance gets once its node registers, as Karpenter's AWS provider adds them: consoles,
// cost reports and dashboards key on Name.
const (
	// TagName is EC2's display name, the node's name.
	TagName = "Name"
	// TagEKSClusterName names the cluster.
	TagEKSClusterName = "eks:eks-cluster-name"
)

// RegisteredTagKeys are the keys TagRegistered may write on an existing instance: the IAM
// policy's CreateTags statement for running instances allows these and no other
// (`aws:TagKeys`).
var RegisteredTagKeys = []string{TagName, NodeClaimTag, TagEKSClusterName}

// TagRegistered tags the instance of a registered NodeClaim with Name (its node's name),
// karpenter.sh/nodeclaim and eks:eks-cluster-name. A key the instance already carries keeps its
// value (an EC2NodeClass's own Name tag wins), so a second call writes nothing. It returns the
// keys it wrote. An instance that is gone is a NodeClaimNotFoundError.
func (p *Provider) TagRegistered(ctx context.Context, providerID, claim, nodeName string) ([]string, error) {
	inst, err := p.instance(ctx, providerID)
	if err != nil {
		return nil, err
	}
	id := aws.ToString(inst.InstanceId)
	want := map[string]string{TagName: nodeName, NodeClaimTag: claim, TagEKSClusterName: p.opts.ClusterName}
	for _, t := range inst.Tags {
		delete(want, aws.ToString(t.Key))
	}
	if len(want) == 0 {
		return nil, nil
	}
	if _, err := p.clients.EC2.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{id}, Tags: ec2Tags(want)}); err != nil {
		if isCode(err, "InvalidInstanceID.NotFound") {
			return nil, &cloudprovider.NodeClaimNotFoundError{Err: fmt.Errorf("instance %s", id)}
		}
		return nil, fmt.Errorf("tagging instance %s: %w", id, err)
	}
	return slices.Sorted(maps.Keys(want)), nil
}
