package aws

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/textproto"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// NodeConfig is the part of AL2023's nodeadm configuration Capstan writes.
type NodeConfig struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Spec       NodeConfigSpec `json:"spec"`
}

// NodeConfigSpec is a NodeConfig's spec.
type NodeConfigSpec struct {
	Cluster NodeConfigCluster `json:"cluster"`
	Kubelet NodeConfigKubelet `json:"kubelet"`
}

// NodeConfigCluster says which cluster the node joins.
type NodeConfigCluster struct {
	Name                 string `json:"name"`
	APIServerEndpoint    string `json:"apiServerEndpoint"`
	CertificateAuthority string `json:"certificateAuthority,omitempty"`
	CIDR                 string `json:"cidr,omitempty"`
}

// NodeConfigKubelet is the kubelet's configuration and flags.
type NodeConfigKubelet struct {
	Config map[string]any `json:"config,omitempty"`
	Flags  []string       `json:"flags,omitempty"`
}

// nodeConfigMediaType is nodeadm's MIME type.
const nodeConfigMediaType = "application/node.eks.aws"

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

// UserData is the machine's user data: the class's own parts first (a MIME multi-part document,
// a NodeConfig or a shell script), then Capstan's NodeConfig, which nodeadm merges last so its
// cluster, kubelet reservations, labels and taints win.
//
// The kubelet settings written are the class's own: what the class leaves unset (maxPods,
// kube-reserved, eviction thresholds) nodeadm derives from the instance type with the formulas
// Reserved models, so one template serves every type of an image.
func (p *Provider) UserData(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim) (string, error) {
	var b strings.Builder
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary("//"); err != nil {
		return "", err
	}
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"//\"\r\n\r\n")
	if nc.Spec.UserData != nil && strings.TrimSpace(*nc.Spec.UserData) != "" {
		if err := writeUserParts(w, *nc.Spec.UserData); err != nil {
			return "", fmt.Errorf("spec.userData: %w", err)
		}
	}
	labels := map[string]string{}
	for k, v := range claim.Labels {
		if kubeletLabel(k) {
			labels[k] = v
		}
	}
	var labelFlag []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		labelFlag = append(labelFlag, k+"="+labels[k])
	}
	taints := []corev1.Taint{karpv1.UnregisteredNoExecuteTaint}
	taints = append(taints, claim.Spec.Taints...)
	taints = append(taints, claim.Spec.StartupTaints...)
	var taintFlag []string
	for _, t := range taints {
		taintFlag = append(taintFlag, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	cfg := map[string]any{}
	if k := nc.Spec.Kubelet; k != nil {
		if k.MaxPods != nil {
			cfg["maxPods"] = *k.MaxPods
		}
		if k.PodsPerCore != nil {
			cfg["podsPerCore"] = *k.PodsPerCore
		}
		if len(k.KubeReserved) > 0 {
			cfg["kubeReserved"] = k.KubeReserved
		}
		if len(k.SystemReserved) > 0 {
			cfg["systemReserved"] = k.SystemReserved
		}
		if len(k.EvictionHard) > 0 {
			cfg["evictionHard"] = k.EvictionHard
		}
		if len(k.ClusterDNS) > 0 {
			cfg["clusterDNS"] = k.ClusterDNS
		}
		if k.CPUCFSQuota != nil {
			cfg["cpuCFSQuota"] = *k.CPUCFSQuota
		}
		if k.ImageGCHighThresholdPercent != nil {
			cfg["imageGCHighThresholdPercent"] = *k.ImageGCHighThresholdPercent
		}
		if k.ImageGCLowThresholdPercent != nil {
			cfg["imageGCLowThresholdPercent"] = *k.ImageGCLowThresholdPercent
		}
		if len(k.EvictionSoft) > 0 {
			cfg["evictionSoft"] = k.EvictionSoft
		}
		if len(k.EvictionSoftGracePeriod) > 0 {
			cfg["evictionSoftGracePeriod"] = k.EvictionSoftGracePeriod
		}
		if k.EvictionMaxPodGracePeriod != nil {
			cfg["evictionMaxPodGracePeriod"] = *k.EvictionMaxPodGracePeriod
		}
	}
	doc := NodeConfig{APIVersion: "node.eks.aws/v1alpha1", Kind: "NodeConfig", Spec: NodeConfigSpec{
		Cluster: NodeConfigCluster{Name: p.opts.ClusterName, APIServerEndpoint: p.opts.ClusterEndpoint,
			CertificateAuthority: p.opts.ClusterCABundle, CIDR: p.opts.ClusterCIDR},
		Kubelet: NodeConfigKubelet{Config: cfg, Flags: []string{
			"--node-labels=" + strings.Join(labelFlag, ","),
			"--register-with-taints=" + strings.Join(taintFlag, ","),
		}},
	}}
	y, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	part, err := w.CreatePart(textproto.MIMEHeader{"Content-Type": {nodeConfigMediaType}})
	if err != nil {
		return "", err
	}
	if _, err := part.Write(y); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// writeUserParts copies the class's user data into w: the parts of a MIME document, or the
// whole as one part (a NodeConfig when it declares one, else a shell script).
func writeUserParts(w *multipart.Writer, ud string) error {
	if strings.HasPrefix(strings.TrimSpace(ud), "MIME-Version:") {
		headerEnd := strings.Index(ud, "\n\n")
		if i := strings.Index(ud, "\r\n\r\n"); i >= 0 && (headerEnd < 0 || i < headerEnd) {
			headerEnd = i
		}
		if headerEnd < 0 {
			return errors.New("a MIME document without a body")
		}
		var boundary string
		for _, line := range strings.Split(ud[:headerEnd], "\n") {
			k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
			if strings.EqualFold(k, "Content-Type") {
				_, params, err := mime.ParseMediaType(strings.TrimSpace(v))
				if err != nil {
					return fmt.Errorf("Content-Type %q: %w", v, err)
				}
				boundary = params["boundary"]
			}
		}
		if boundary == "" {
			return errors.New("a MIME document without a multipart boundary")
		}
		r := multipart.NewReader(strings.NewReader(ud[headerEnd:]), boundary)
		for {
			part, err := r.NextPart()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("reading MIME part: %w", err)
			}
			var body strings.Builder
			if _, err := io.Copy(&body, part); err != nil {
				return err
			}
			out, err := w.CreatePart(textproto.MIMEHeader{"Content-Type": {part.Header.Get("Content-Type")}})
			if err != nil {
				return err
			}
			if _, err := out.Write([]byte(body.String())); err != nil {
				return err
			}
		}
	}
	ct := "text/x-shellscript; charset=\"us-ascii\""
	if strings.Contains(ud, "kind: NodeConfig") {
		ct = nodeConfigMediaType
	}
	out, err := w.CreatePart(textproto.MIMEHeader{"Content-Type": {ct}})
	if err != nil {
		return err
	}
	_, err = out.Write([]byte(ud))
	return err
}

// launchTemplate is one launch configuration: an image and everything the class and claim put
// into the template.
type launchTemplate struct {
	name  string
	image string
	data  *ec2types.RequestLaunchTemplateData
}

// templateFor builds the launch template for a class, claim and image.
func (p *Provider) templateFor(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim, image string) (*launchTemplate, error) {
	ud, err := p.UserData(nc, claim)
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
	h := fnv.New64a()
	_, _ = fmt.Fprintf(h, "%s|%s|%v|%s|%s|%s|%d|%v|%v|%v", image, ud, sgs, nc.Status.InstanceProfile, endpoint, tokens, hops,
		aws.ToBool(nc.Spec.DetailedMonitoring), describeBlockDevices(data.BlockDeviceMappings), nc.Spec.AssociatePublicIPAddress)
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

// blockDevices are the class's block devices, or AL2023's default root volume (20 GiB gp3,
// encrypted).
func blockDevices(nc *awsv1.EC2NodeClass) []ec2types.LaunchTemplateBlockDeviceMappingRequest {
	if len(nc.Spec.BlockDeviceMappings) == 0 {
		return []ec2types.LaunchTemplateBlockDeviceMappingRequest{{DeviceName: aws.String("/dev/xvda"), Ebs: &ec2types.LaunchTemplateEbsBlockDeviceRequest{
			VolumeSize: aws.Int32(int32(DefaultRootVolume.Value() >> 30)), VolumeType: ec2types.VolumeTypeGp3, Encrypted: aws.Bool(true), DeleteOnTermination: aws.Bool(true)}}}
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
	tags["eks:eks-cluster-name"] = p.opts.ClusterName
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

// ensureTemplate makes sure the template exists (created once, found by name after).
func (p *Provider) ensureTemplate(ctx context.Context, lt *launchTemplate, tags map[string]string) error {
	p.templatesMu.Lock()
	known := p.templates[lt.name]
	p.templatesMu.Unlock()
	if known {
		return nil
	}
	_, err := p.clients.EC2.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{LaunchTemplateNames: []string{lt.name}})
	if err != nil && !isCode(err, "InvalidLaunchTemplateName.NotFoundException") {
		return fmt.Errorf("describing launch template %s: %w", lt.name, err)
	}
	if err != nil {
		t := maps.Clone(tags)
		t["karpenter.k8s.aws/cluster"] = p.opts.ClusterName
		_, err = p.clients.EC2.CreateLaunchTemplate(ctx, &ec2.CreateLaunchTemplateInput{LaunchTemplateName: aws.String(lt.name), LaunchTemplateData: lt.data,
			TagSpecifications: []ec2types.TagSpecification{{ResourceType: ec2types.ResourceTypeLaunchTemplate, Tags: ec2Tags(t)}}})
		if err != nil && !isCode(err, "InvalidLaunchTemplateName.AlreadyExistsException") {
			return fmt.Errorf("creating launch template %s: %w", lt.name, err)
		}
	}
	p.templatesMu.Lock()
	p.templates[lt.name] = true
	p.templatesMu.Unlock()
	return nil
}

// usedTemplate records that a launch used a template, for its garbage collection.
func (p *Provider) usedTemplate(name string) {
	p.templatesMu.Lock()
	defer p.templatesMu.Unlock()
	p.templateUse[name] = p.clock.Now()
}

// TemplateTTL is how long a launch template no launch has used is kept.
const TemplateTTL = time.Hour

// GarbageCollectTemplates deletes the class's launch templates that no launch used for
// TemplateTTL (by this process; a template this process never used counts from its creation):
// a class whose claims' labels or taints change would otherwise pile them up. A template
// deleted while a launch is about to use it is recreated by that launch's retry.
func (p *Provider) GarbageCollectTemplates(ctx context.Context, nc *awsv1.EC2NodeClass) error {
	out, err := p.clients.EC2.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + awsv1.TagEC2NodeClass), Values: []string{nc.Name}},
		{Name: aws.String("tag:karpenter.k8s.aws/cluster"), Values: []string{p.opts.ClusterName}},
	}})
	if err != nil {
		return fmt.Errorf("listing launch templates of EC2NodeClass %s: %w", nc.Name, err)
	}
	now := p.clock.Now()
	for _, lt := range out.LaunchTemplates {
		name := aws.ToString(lt.LaunchTemplateName)
		p.templatesMu.Lock()
		last, ok := p.templateUse[name]
		p.templatesMu.Unlock()
		if !ok {
			last = aws.ToTime(lt.CreateTime)
		}
		if now.Sub(last) < TemplateTTL {
			continue
		}
		if _, err := p.clients.EC2.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: lt.LaunchTemplateName}); err != nil &&
			!isCode(err, "InvalidLaunchTemplateName.NotFoundException") {
			return fmt.Errorf("deleting launch template %s: %w", name, err)
		}
		p.forgetTemplate(name)
	}
	return nil
}

// forgetTemplate drops a template from the cache (deleted behind Capstan's back).
func (p *Provider) forgetTemplate(name string) {
	p.templatesMu.Lock()
	defer p.templatesMu.Unlock()
	delete(p.templates, name)
	delete(p.templateUse, name)
}

// isCode reports whether err is an AWS API error with this code.
func isCode(err error, code string) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == code
}

// capacityErrors are CreateFleet error codes that mean "no capacity for this offering now".
var capacityErrors = []string{"InsufficientInstanceCapacity", "InsufficientCapacity", "MaxSpotInstanceCountExceeded",
	"UnfulfillableCapacity", "Unsupported", "InsufficientFreeAddressesInSubnet", "SpotMaxPriceTooLow"}

// ValidateUserData checks that the class's user data can be merged with Capstan's (a MIME
// document needs a multipart boundary and readable parts); the error names spec.userData.
func ValidateUserData(nc *awsv1.EC2NodeClass) error {
	if nc.Spec.UserData == nil || strings.TrimSpace(*nc.Spec.UserData) == "" {
		return nil
	}
	var b strings.Builder
	if err := writeUserParts(multipart.NewWriter(&b), *nc.Spec.UserData); err != nil {
		return fmt.Errorf("spec.userData: %w", err)
	}
	return nil
}
