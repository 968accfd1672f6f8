package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
)

// kubeletLabel reports whether the kubelet may set a label on its own Node (the NodeRestriction
// admission plugin refuses kubernetes.io and k8s.io labels except these).
func kubeletLabel(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return true
	}
	if domain != "kubernetes.io" && domain != "k8s.io" && !strings.HasSuffix(domain, ".kubernetes.io") && !strings.HasSuffix(domain, ".k8s.io") {
		return true
	}
	switch {
	case strings.HasSuffix(domain, "kubelet.kubernetes.io"), strings.HasSuffix(domain, "node.kubernetes.io"):
		return true
	}
	return slices.Contains([]string{corev1.LabelHostname, corev1.LabelInstanceTypeStable, corev1.LabelOSStable, corev1.LabelArchStable,
		corev1.LabelTopologyZone, corev1.LabelTopologyRegion}, key)
}

// UserData is the machine's user data in its image family's format (amifamily.UserData): the
// cluster to join, the claim's labels (those the kubelet may set) and taints behind
// karpenter.sh/unregistered, the class's kubelet settings, and the class's own user data merged
// as the family takes it. A claim whose taints or labels no node could register with gets an
// *cloudprovider.InvalidNodeClaimError and no user data.
func (p *Provider) UserData(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim) (string, error) {
	if err := cloudprovider.ValidateNodeClaim(claim); err != nil {
		return "", err
	}
	return p.userData(nc, claim, nil)
}

// userData is UserData for one instance type: with reserved ENIs and no maxPods of the class's
// own, the type's pod count (it) is written as maxPods, since the image's bootstrap would count
// every ENI. The claim was checked (cloudprovider.ValidateNodeClaim) by the caller.
func (p *Provider) userData(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim, it *cloudprovider.InstanceType) (string, error) {
	labels := map[string]string{}
	for k, v := range claim.Labels {
		if kubeletLabel(k) {
			labels[k] = v
		}
	}
	taints := []corev1.Taint{karpv1.UnregisteredNoExecuteTaint}
	taints = append(taints, claim.Spec.Taints...)
	taints = append(taints, claim.Spec.StartupTaints...)
	b := amifamily.Bootstrap{ClusterName: p.opts.ClusterName, Endpoint: p.opts.ClusterEndpoint, CABundle: p.opts.ClusterCABundle,
		CIDR: p.opts.ClusterCIDR, Labels: labels, Taints: taints, Kubelet: nc.Spec.Kubelet}
	if it != nil && p.opts.ReservedENIs > 0 && (nc.Spec.Kubelet == nil || nc.Spec.Kubelet.MaxPods == nil) {
		k := &awsv1.KubeletConfiguration{}
		if nc.Spec.Kubelet != nil {
			k = nc.Spec.Kubelet.DeepCopy()
		}
		pods := it.Capacity.Pods().Value()
		k.MaxPods = &[]int32{int32(pods)}[0]
		b.Kubelet = k
	}
	if nc.Spec.UserData != nil {
		b.Custom = *nc.Spec.UserData
	}
	return amifamily.UserData(amifamily.Of(&nc.Spec), b)
}

// launchTemplate is one launch configuration: an image and everything the class and claim put
// into the template.
type launchTemplate struct {
	name  string
	image string
	data  *ec2types.RequestLaunchTemplateData
}

// templateFor builds the launch template for a class, claim and image.
// A launch into a capacity reservation (reservation set) targets it, and a capacity block's
// launch is of its market type.
func (p *Provider) templateFor(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim, image string, it *cloudprovider.InstanceType, reservation string) (*launchTemplate, error) {
	ud, err := p.userData(nc, claim, it)
	if err != nil {
		return nil, err
	}
	md := nc.Spec.MetadataOptions
	endpoint, tokens, hops := "enabled", "required", int32(1)
	if md != nil {
		if md.HTTPEndpoint != nil {
			endpoint = *md.HTTPEndpoint
		}
		if md.HTTPTokens != nil {
			tokens = *md.HTTPTokens
		}
		if md.HTTPPutResponseHopLimit != nil {
			hops = int32(*md.HTTPPutResponseHopLimit)
		}
	}
	var sgs []string
	for _, g := range nc.Status.SecurityGroups {
		sgs = append(sgs, g.ID)
	}
	data := &ec2types.RequestLaunchTemplateData{
		ImageId:            aws.String(image),
		UserData:           aws.String(base64.StdEncoding.EncodeToString([]byte(ud))),
		SecurityGroupIds:   sgs,
		IamInstanceProfile: &ec2types.LaunchTemplateIamInstanceProfileSpecificationRequest{Name: aws.String(nc.Status.InstanceProfile)},
		MetadataOptions: &ec2types.LaunchTemplateInstanceMetadataOptionsRequest{HttpEndpoint: ec2types.LaunchTemplateInstanceMetadataEndpointState(endpoint),
			HttpTokens: ec2types.LaunchTemplateHttpTokensState(tokens), HttpPutResponseHopLimit: aws.Int32(hops)},
		Monitoring:          &ec2types.LaunchTemplatesMonitoringRequest{Enabled: aws.Bool(aws.ToBool(nc.Spec.DetailedMonitoring))},
		BlockDeviceMappings: blockDevices(nc),
		TagSpecifications: []ec2types.LaunchTemplateTagSpecificationRequest{
			{ResourceType: ec2types.ResourceTypeNetworkInterface, Tags: ec2Tags(p.resourceTags(nc, claim))},
		},
	}
	if nc.Spec.AssociatePublicIPAddress != nil {
		data.NetworkInterfaces = []ec2types.LaunchTemplateInstanceNetworkInterfaceSpecificationRequest{{
			DeviceIndex: aws.Int32(0), AssociatePublicIpAddress: nc.Spec.AssociatePublicIPAddress, Groups: sgs}}
		data.SecurityGroupIds = nil
	}
	if reservation != "" {
		data.CapacityReservationSpecification = &ec2types.LaunchTemplateCapacityReservationSpecificationRequest{
			CapacityReservationTarget: &ec2types.CapacityReservationTarget{CapacityReservationId: aws.String(reservation)}}
		if r, ok := reservationOf(nc, reservation); ok && r.ReservationType == awsv1.CapacityReservationTypeCapacityBlock {
			data.InstanceMarketOptions = &ec2types.LaunchTemplateInstanceMarketOptionsRequest{MarketType: ec2types.MarketTypeCapacityBlock}
		}
	}
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s|%s|%v|%s|%s|%s|%d|%v|%v|%v|%s", image, ud, sgs, nc.Status.InstanceProfile, endpoint, tokens, hops,
		aws.ToBool(nc.Spec.DetailedMonitoring), describeBlockDevices(data.BlockDeviceMappings), nc.Spec.AssociatePublicIPAddress, reservation)
	tags := p.resourceTags(nc, claim)
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		_, _ = fmt.Fprintf(h, "|%s=%s", k, tags[k])
	}
	return &launchTemplate{name: fmt.Sprintf("capstan/%s/%x", p.opts.ClusterName, h.Sum64()), image: image, data: data}, nil
}

func describeBlockDevices(b []ec2types.LaunchTemplateBlockDeviceMappingRequest) string {
	var parts []string
	for _, d := range b {
		s := aws.ToString(d.DeviceName)
		if e := d.Ebs; e != nil {
			s += fmt.Sprintf(":%d:%s:%v:%d:%d:%s:%s:%v", aws.ToInt32(e.VolumeSize), e.VolumeType, aws.ToBool(e.Encrypted), aws.ToInt32(e.Iops),
				aws.ToInt32(e.Throughput), aws.ToString(e.KmsKeyId), aws.ToString(e.SnapshotId), aws.ToBool(e.DeleteOnTermination))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ";")
}

// blockDevices are the class's block devices, or its image family's default volumes (gp3,
// encrypted).
func blockDevices(nc *awsv1.EC2NodeClass) []ec2types.LaunchTemplateBlockDeviceMappingRequest {
	if len(nc.Spec.BlockDeviceMappings) == 0 {
		var out []ec2types.LaunchTemplateBlockDeviceMappingRequest
		for _, v := range amifamily.Of(&nc.Spec).DefaultVolumes() {
			out = append(out, ec2types.LaunchTemplateBlockDeviceMappingRequest{DeviceName: aws.String(v.Device), Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{
				VolumeSize: aws.Int32(v.SizeGiB), VolumeType: ec2types.VolumeTypeGp3, Encrypted: aws.Bool(true), DeleteOnTermination: aws.Bool(true)}})
		}
		return out
	}
	var out []ec2types.LaunchTemplateBlockDeviceMappingRequest
	for _, b := range nc.Spec.BlockDeviceMappings {
		m := ec2types.LaunchTemplateBlockDeviceMappingRequest{DeviceName: b.DeviceName}
		if e := b.EBS; e != nil {
			m.Ebs = &ec2types.LaunchTemplateEbsBlockDeviceRequest{DeleteOnTermination: e.DeleteOnTermination, Encrypted: e.Encrypted,
				KmsKeyId: e.KMSKeyID, SnapshotId: e.SnapshotID}
			if e.IOPS != nil {
				m.Ebs.Iops = aws.Int32(int32(*e.IOPS))
			}
			if e.Throughput != nil {
				m.Ebs.Throughput = aws.Int32(int32(*e.Throughput))
			}
			if e.VolumeSize != nil {
				m.Ebs.VolumeSize = aws.Int32(int32((e.VolumeSize.Value() + 1<<30 - 1) >> 30))
			}
			if e.VolumeType != nil {
				m.Ebs.VolumeType = ec2types.VolumeType(*e.VolumeType)
			}
		}
		out = append(out, m)
	}
	return out
}

// resourceTags are the tags of everything launched for a claim: the class's, then Capstan's
// (which the CRD forbids the class to set).
func (p *Provider) resourceTags(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim) map[string]string {
	tags := maps.Clone(nc.Spec.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags["kubernetes.io/cluster/"+p.opts.ClusterName] = "owned"
	tags[TagEKSClusterName] = p.opts.ClusterName
	tags[awsv1.TagEC2NodeClass] = nc.Name
	if np := claim.Labels[karpv1.NodePoolLabelKey]; np != "" {
		tags[karpv1.NodePoolLabelKey] = np
	}
	return tags
}

func ec2Tags(m map[string]string) []ec2types.Tag {
	var out []ec2types.Tag
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, ec2types.Tag{Key: aws.String(k), Value: aws.String(m[k])})
	}
	return out
}

// GarbageCollectTemplates deletes the class's launch templates no launch used for TemplateTTL
// (templates.collect).
func (p *Provider) GarbageCollectTemplates(ctx context.Context, nc *awsv1.EC2NodeClass) error {
	return p.templates.collect(ctx, nc.Name)
}

// isCode reports whether err is an AWS API error with this code.
func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// capacityErrors are CreateFleet error codes that mean "no capacity for this offering now".
var capacityErrors = []string{"InsufficientInstanceCapacity", "InsufficientCapacity", "MaxSpotInstanceCountExceeded", "ReservationCapacityExceeded",
	"UnfulfillableCapacity", "Unsupported", "InsufficientFreeAddressesInSubnet", "SpotMaxPriceTooLow"}

// ValidateUserData checks that the class's user data can be merged for its image family (a
// MIME document needs a multipart boundary and readable parts, Bottlerocket's must be TOML); the
// error names spec.userData. dropped names what the family leaves out (Bottlerocket settings it
// would refuse, spec.kubelet fields its kubelet cannot be given).
func ValidateUserData(nc *awsv1.EC2NodeClass) (dropped []string, err error) {
	f, custom := amifamily.Of(&nc.Spec), ""
	if nc.Spec.UserData != nil {
		custom = *nc.Spec.UserData
	}
	if err := amifamily.Validate(f, custom); err != nil {
		return nil, err
	}
	return amifamily.Dropped(f, custom, nc.Spec.Kubelet), nil
}
