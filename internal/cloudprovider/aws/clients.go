package aws

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"github.com/aws/aws-sdk-go-v2/service/pricing"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
)

// EC2API lists the EC2 calls Capstan makes.
type EC2API interface {
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeSecurityGroups(context.Context, *ec2.DescribeSecurityGroupsInput, ...func(*ec2.Options)) (*ec2.DescribeSecurityGroupsOutput, error)
	DescribeImages(context.Context, *ec2.DescribeImagesInput, ...func(*ec2.Options)) (*ec2.DescribeImagesOutput, error)
	DescribeInstanceTypes(context.Context, *ec2.DescribeInstanceTypesInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypesOutput, error)
	DescribeInstanceTypeOfferings(context.Context, *ec2.DescribeInstanceTypeOfferingsInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceTypeOfferingsOutput, error)
	DescribeSpotPriceHistory(context.Context, *ec2.DescribeSpotPriceHistoryInput, ...func(*ec2.Options)) (*ec2.DescribeSpotPriceHistoryOutput, error)
	CreateLaunchTemplate(context.Context, *ec2.CreateLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.CreateLaunchTemplateOutput, error)
	DescribeLaunchTemplates(context.Context, *ec2.DescribeLaunchTemplatesInput, ...func(*ec2.Options)) (*ec2.DescribeLaunchTemplatesOutput, error)
	DeleteLaunchTemplate(context.Context, *ec2.DeleteLaunchTemplateInput, ...func(*ec2.Options)) (*ec2.DeleteLaunchTemplateOutput, error)
	CreateFleet(context.Context, *ec2.CreateFleetInput, ...func(*ec2.Options)) (*ec2.CreateFleetOutput, error)
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	TerminateInstances(context.Context, *ec2.TerminateInstancesInput, ...func(*ec2.Options)) (*ec2.TerminateInstancesOutput, error)
	CreateTags(context.Context, *ec2.CreateTagsInput, ...func(*ec2.Options)) (*ec2.CreateTagsOutput, error)
	DescribeInstanceStatus(context.Context, *ec2.DescribeInstanceStatusInput, ...func(*ec2.Options)) (*ec2.DescribeInstanceStatusOutput, error)
	DescribeCapacityReservations(context.Context, *ec2.DescribeCapacityReservationsInput, ...func(*ec2.Options)) (*ec2.DescribeCapacityReservationsOutput, error)
}

// EKSAPI lists the EKS calls Capstan makes (the cluster's endpoint, CA and service CIDR, with
// --eks-control-plane).
type EKSAPI interface {
	DescribeCluster(context.Context, *eks.DescribeClusterInput, ...func(*eks.Options)) (*eks.DescribeClusterOutput, error)
}

// SSMAPI lists the SSM calls Capstan makes (public AMI parameters).
type SSMAPI interface {
	GetParameter(context.Context, *ssm.GetParameterInput, ...func(*ssm.Options)) (*ssm.GetParameterOutput, error)
}

// PricingAPI lists the Pricing calls Capstan makes.
type PricingAPI interface {
	GetProducts(context.Context, *pricing.GetProductsInput, ...func(*pricing.Options)) (*pricing.GetProductsOutput, error)
}

// IAMAPI lists the IAM calls Capstan makes (instance profiles for a NodeClass's role).
type IAMAPI interface {
	GetInstanceProfile(context.Context, *iam.GetInstanceProfileInput, ...func(*iam.Options)) (*iam.GetInstanceProfileOutput, error)
	CreateInstanceProfile(context.Context, *iam.CreateInstanceProfileInput, ...func(*iam.Options)) (*iam.CreateInstanceProfileOutput, error)
	AddRoleToInstanceProfile(context.Context, *iam.AddRoleToInstanceProfileInput, ...func(*iam.Options)) (*iam.AddRoleToInstanceProfileOutput, error)
	RemoveRoleFromInstanceProfile(context.Context, *iam.RemoveRoleFromInstanceProfileInput, ...func(*iam.Options)) (*iam.RemoveRoleFromInstanceProfileOutput, error)
	DeleteInstanceProfile(context.Context, *iam.DeleteInstanceProfileInput, ...func(*iam.Options)) (*iam.DeleteInstanceProfileOutput, error)
}

// SQSAPI lists the SQS calls Capstan makes (the interruption queue).
type SQSAPI interface {
	GetQueueUrl(context.Context, *sqs.GetQueueUrlInput, ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
	ReceiveMessage(context.Context, *sqs.ReceiveMessageInput, ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(context.Context, *sqs.DeleteMessageInput, ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
}

// Clients are the AWS clients, built once.
type Clients struct {
	EC2     EC2API
	SSM     SSMAPI
	Pricing PricingAPI
	IAM     IAMAPI
	SQS     SQSAPI
	EKS     EKSAPI
	// Region is the region the clients call.
	Region string
}

// ClientOptions configure the clients.
type ClientOptions struct {
	// Region overrides the region the standard chain finds (AWS_REGION, the shared config, IMDS).
	Region string
	// EndpointURL sends every service's calls to this URL (local endpoints, VPC endpoints);
	// empty leaves the SDK's resolution, which also reads AWS_ENDPOINT_URL and
	// AWS_ENDPOINT_URL_<SERVICE>.
	EndpointURL string
	// MaxAttempts bounds each call's attempts with adaptive retries (default 5).
	MaxAttempts int
	// ConfigOptions are passed to config.LoadDefaultConfig after Capstan's (tests set static
	// credentials here).
	ConfigOptions []func(*config.LoadOptions) error
}

// NewClients builds the clients from the standard credential chain (environment, shared files,
// web identity — IRSA and Pod Identity work unchanged — and IMDS).
func NewClients(ctx context.Context, o ClientOptions) (*Clients, error) {
	attempts := o.MaxAttempts
	if attempts == 0 {
		attempts = 5
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer {
			return retry.AddWithMaxAttempts(retry.NewAdaptiveMode(), attempts)
		}),
	}
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	opts = append(opts, o.ConfigOptions...)
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("no AWS region: set --aws-region (AWS_REGION) or a region in the shared config")
	}
	// Only an endpoint given here replaces the SDK's own: left unset, each client keeps what the
	// SDK resolved (AWS_ENDPOINT_URL, AWS_ENDPOINT_URL_<SERVICE>, the shared config).
	endpoint := func(base **string) {
		if o.EndpointURL != "" {
			*base = aws.String(o.EndpointURL)
		}
	}
	pricingCfg := cfg.Copy()
	pricingCfg.Region = PricingRegion(cfg.Region)
	return &Clients{
		EC2:     ec2.NewFromConfig(cfg, func(x *ec2.Options) { endpoint(&x.BaseEndpoint) }),
		SSM:     ssm.NewFromConfig(cfg, func(x *ssm.Options) { endpoint(&x.BaseEndpoint) }),
		Pricing: pricing.NewFromConfig(pricingCfg, func(x *pricing.Options) { endpoint(&x.BaseEndpoint) }),
		IAM:     iam.NewFromConfig(cfg, func(x *iam.Options) { endpoint(&x.BaseEndpoint) }),
		SQS:     sqs.NewFromConfig(cfg, func(x *sqs.Options) { endpoint(&x.BaseEndpoint) }),
		EKS:     eks.NewFromConfig(cfg, func(x *eks.Options) { endpoint(&x.BaseEndpoint) }),
		Region:  cfg.Region,
	}, nil
}

// PricingRegion is the region whose Pricing endpoint serves region's prices: the API has
// endpoints only in us-east-1, eu-central-1 and ap-south-1 (and cn-northwest-1 for China).
func PricingRegion(region string) string {
	switch {
	case strings.HasPrefix(region, "cn-"):
		return "cn-northwest-1"
	case strings.HasPrefix(region, "eu-"), strings.HasPrefix(region, "me-"), strings.HasPrefix(region, "il-"), strings.HasPrefix(region, "af-"):
		return "eu-central-1"
	case strings.HasPrefix(region, "ap-"):
		return "ap-south-1"
	default:
		return "us-east-1"
	}
}

// Cluster is what nodes need to know of an EKS cluster to join it.
type Cluster struct {
	Endpoint, CABundle, ServiceCIDR string
}

// DescribeCluster reads an EKS cluster's endpoint, CA bundle (base64 PEM) and service CIDR, as
// Karpenter's eksControlPlane setting does.
func DescribeCluster(ctx context.Context, c EKSAPI, name string) (Cluster, error) {
	out, err := c.DescribeCluster(ctx, &eks.DescribeClusterInput{Name: aws.String(name)})
	if err != nil {
		return Cluster{}, fmt.Errorf("describing EKS cluster %s: %w", name, err)
	}
	cl := out.Cluster
	if cl == nil || aws.ToString(cl.Endpoint) == "" {
		return Cluster{}, fmt.Errorf("EKS cluster %s has no endpoint yet", name)
	}
	r := Cluster{Endpoint: aws.ToString(cl.Endpoint)}
	if cl.CertificateAuthority != nil {
		r.CABundle = aws.ToString(cl.CertificateAuthority.Data)
	}
	if n := cl.KubernetesNetworkConfig; n != nil {
		r.ServiceCIDR = aws.ToString(n.ServiceIpv4Cidr)
		if r.ServiceCIDR == "" {
			r.ServiceCIDR = aws.ToString(n.ServiceIpv6Cidr)
		}
	}
	return r, nil
}
