package aws

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"
	corev1 "k8s.io/api/core/v1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
)

// ResolveError says which selector of an EC2NodeClass resolved to nothing, or why a lookup
// failed; the condition of that field carries it.
type ResolveError struct {
	// Condition is the EC2NodeClass condition type the failure belongs to (SubnetsReady, …).
	Condition string
	// Reason is the condition's reason (SubnetsNotFound, …).
	Reason string
	Err    error
	// Empty is set when the selectors matched nothing (as opposed to a call that failed).
	Empty bool
}

func (e *ResolveError) Error() string { return e.Err.Error() }
func (e *ResolveError) Unwrap() error { return e.Err }

// describeTags renders selector tags for messages: "k=v,k2=*".
func describeTags(tags map[string]string) string {
	keys := slices.Sorted(maps.Keys(tags))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + tags[k]
	}
	return strings.Join(parts, ",")
}

// tagFilters are EC2 filters selecting resources with every tag ("*" = any value).
func tagFilters(tags map[string]string) []ec2types.Filter {
	var out []ec2types.Filter
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		if v := tags[k]; v == "*" {
			out = append(out, ec2types.Filter{Name: aws.String("tag-key"), Values: []string{k}})
		} else {
			out = append(out, ec2types.Filter{Name: aws.String("tag:" + k), Values: []string{v}})
		}
	}
	return out
}

// ResolveSubnets returns the subnets the class's terms select (a union of terms), most free
// addresses first.
func (p *Provider) ResolveSubnets(ctx context.Context, nc *awsv1.EC2NodeClass) ([]awsv1.Subnet, error) {
	seen := map[string]ec2types.Subnet{}
	var empty []string
	for _, t := range nc.Spec.SubnetSelectorTerms {
		var filters []ec2types.Filter
		what := ""
		if t.ID != "" {
			filters, what = []ec2types.Filter{{Name: aws.String("subnet-id"), Values: []string{t.ID}}}, "id "+t.ID
		} else {
			filters, what = tagFilters(t.Tags), "tags "+describeTags(t.Tags)
		}
		n := 0
		pg := ec2.NewDescribeSubnetsPaginator(p.clients.EC2, &ec2.DescribeSubnetsInput{Filters: filters})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return nil, &ResolveError{Condition: awsv1.ConditionTypeSubnetsReady, Reason: "SubnetsNotFound", Err: fmt.Errorf("describing subnets (%s): %w", what, err)}
			}
			for _, sn := range out.Subnets {
				seen[aws.ToString(sn.SubnetId)] = sn
				n++
			}
		}
		if n == 0 {
			empty = append(empty, what)
		}
	}
	if len(seen) == 0 {
		return nil, &ResolveError{Condition: awsv1.ConditionTypeSubnetsReady, Reason: "SubnetsNotFound", Empty: true, Err: fmt.Errorf("no subnet matches %s", strings.Join(empty, "; nor "))}
	}
	subnets := slices.Collect(maps.Values(seen))
	sort.Slice(subnets, func(i, j int) bool {
		a, b := aws.ToInt32(subnets[i].AvailableIpAddressCount), aws.ToInt32(subnets[j].AvailableIpAddressCount)
		if a != b {
			return a > b
		}
		return aws.ToString(subnets[i].SubnetId) < aws.ToString(subnets[j].SubnetId)
	})
	out := make([]awsv1.Subnet, len(subnets))
	for i, sn := range subnets {
		out[i] = awsv1.Subnet{ID: aws.ToString(sn.SubnetId), Zone: aws.ToString(sn.AvailabilityZone), ZoneID: aws.ToString(sn.AvailabilityZoneId)}
	}
	return out, nil
}

// ResolveSecurityGroups returns the security groups the class's terms select, by id.
func (p *Provider) ResolveSecurityGroups(ctx context.Context, nc *awsv1.EC2NodeClass) ([]awsv1.SecurityGroup, error) {
	seen := map[string]awsv1.SecurityGroup{}
	var empty []string
	for _, t := range nc.Spec.SecurityGroupSelectorTerms {
		var filters []ec2types.Filter
		what := ""
		switch {
		case t.ID != "":
			filters, what = []ec2types.Filter{{Name: aws.String("group-id"), Values: []string{t.ID}}}, "id "+t.ID
		case t.Name != "":
			filters, what = []ec2types.Filter{{Name: aws.String("group-name"), Values: []string{t.Name}}}, "name "+t.Name
		default:
			filters, what = tagFilters(t.Tags), "tags "+describeTags(t.Tags)
		}
		n := 0
		pg := ec2.NewDescribeSecurityGroupsPaginator(p.clients.EC2, &ec2.DescribeSecurityGroupsInput{Filters: filters})
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return nil, &ResolveError{Condition: awsv1.ConditionTypeSecurityGroupsReady, Reason: "SecurityGroupsNotFound", Err: fmt.Errorf("describing security groups (%s): %w", what, err)}
			}
			for _, g := range out.SecurityGroups {
				seen[aws.ToString(g.GroupId)] = awsv1.SecurityGroup{ID: aws.ToString(g.GroupId), Name: aws.ToString(g.GroupName)}
				n++
			}
		}
		if n == 0 {
			empty = append(empty, what)
		}
	}
	if len(seen) == 0 {
		return nil, &ResolveError{Condition: awsv1.ConditionTypeSecurityGroupsReady, Reason: "SecurityGroupsNotFound", Empty: true, Err: fmt.Errorf("no security group matches %s", strings.Join(empty, "; nor "))}
	}
	out := slices.Collect(maps.Values(seen))
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// archOf maps EC2's architecture names to Kubernetes'.
func archOf(ec2Arch string) string {
	switch ec2Arch {
	case "x86_64":
		return "amd64"
	case "arm64":
		return "arm64"
	}
	return ec2Arch
}

// ResolveAMIs returns the images the class's terms select, newest first, each with the
// requirements of the types it serves.
func (p *Provider) ResolveAMIs(ctx context.Context, nc *awsv1.EC2NodeClass) ([]awsv1.AMI, error) {
	seen := map[string]foundImage{}
	var empty []string
	// known are the requirement sets of the images an alias's parameters name.
	known := map[string][][]awsv1.AMIRequirement{}
	for _, t := range nc.Spec.AMISelectorTerms {
		in, what := imagesInput(t)
		if t.Alias != "" || t.SSMParameter != "" {
			ids, err := p.parameterImages(ctx, t, what, known)
			if err != nil {
				return nil, err
			}
			if len(ids) == 0 {
				empty = append(empty, what)
				continue
			}
			// By filter, not ImageIds: EC2 refuses a whole call that names one image it does not
			// have (InvalidAMIID.NotFound), as when a parameter still names a deregistered image.
			in.Filters = []ec2types.Filter{{Name: aws.String("image-id"), Values: ids}}
		}
		n := 0
		pg := ec2.NewDescribeImagesPaginator(p.clients.EC2, &in)
		for pg.HasMorePages() {
			out, err := pg.NextPage(ctx)
			if err != nil {
				return nil, &ResolveError{Condition: awsv1.ConditionTypeAMIsReady, Reason: "AMINotFound", Err: fmt.Errorf("describing images (%s): %w", what, err)}
			}
			for _, im := range out.Images {
				seen[aws.ToString(im.ImageId)] = newFoundImage(im, known[aws.ToString(im.ImageId)])
				n++
			}
		}
		if n == 0 {
			empty = append(empty, what)
		}
	}
	if len(seen) == 0 {
		return nil, &ResolveError{Condition: awsv1.ConditionTypeAMIsReady, Reason: "AMINotFound", Empty: true,
			Err: fmt.Errorf("no image matches %s", strings.Join(empty, "; nor "))}
	}
	return amisFrom(slices.Collect(maps.Values(seen)), p.clock.Now()), nil
}

// foundImage is an image a term selected.
type foundImage struct {
	img     ec2types.Image
	created time.Time
	// serves are the requirement sets an alias's parameters gave the image (nil: its
	// architecture alone).
	serves [][]awsv1.AMIRequirement
}

// newFoundImage is an image with the requirement sets it serves (nil: its architecture alone).
func newFoundImage(im ec2types.Image, serves [][]awsv1.AMIRequirement) foundImage {
	return foundImage{img: im, created: parseTime(aws.ToString(im.CreationDate)), serves: serves}
}

// imagesInput is the DescribeImages call of one term, and how errors name the term. An alias's
// or SSM parameter's call is filled with the images its parameters name. Deprecated images are
// listed too (EC2 leaves them out unless asked): one is booted when nothing current serves a
// type. A name without an owner (alone or with tags) is looked up among Amazon's images and the
// account's own, as Karpenter does, not among every public image.
func imagesInput(t awsv1.AMISelectorTerm) (in ec2.DescribeImagesInput, what string) {
	in.IncludeDeprecated = aws.Bool(true)
	switch {
	case t.Alias != "":
		return in, "alias " + t.Alias
	case t.SSMParameter != "":
		return in, "ssmParameter " + t.SSMParameter
	case t.ID != "":
		in.Filters = []ec2types.Filter{{Name: aws.String("image-id"), Values: []string{t.ID}}}
		return in, "id " + t.ID
	}
	if t.Name != "" {
		in.Filters = append(in.Filters, ec2types.Filter{Name: aws.String("name"), Values: []string{t.Name}})
		what = "name " + t.Name
	}
	if len(t.Tags) > 0 {
		in.Filters = append(in.Filters, tagFilters(t.Tags)...)
		what = strings.TrimSpace(what + " tags " + describeTags(t.Tags))
	}
	if t.Owner != "" {
		in.Owners = []string{t.Owner}
		what += " owner " + t.Owner
	} else if t.Name != "" || t.Tags == nil {
		in.Owners = []string{"self", "amazon"}
	}
	return in, what
}

// parameterImages reads the images an alias's (for the cluster's Kubernetes version) or an SSM
// parameter term's parameters name, recording in known the requirement sets an alias's
// parameters give them; what names the term in errors. A parameter that does not exist names
// none.
func (p *Provider) parameterImages(ctx context.Context, t awsv1.AMISelectorTerm, what string, known map[string][][]awsv1.AMIRequirement) ([]string, error) {
	fail := func(format string, args ...any) error {
		return &ResolveError{Condition: awsv1.ConditionTypeAMIsReady, Reason: "AMINotFound", Err: fmt.Errorf(format, args...)}
	}
	queries := []amifamily.Query{{Parameter: t.SSMParameter}}
	if t.Alias != "" {
		kv, err := p.kubeVersion(ctx)
		if err != nil {
			return nil, fail("resolving alias %s: reading the cluster's Kubernetes version: %w", t.Alias, err)
		}
		if queries, err = amifamily.AliasQueries(t.Alias, kv); err != nil {
			return nil, &ResolveError{Condition: awsv1.ConditionTypeAMIsReady, Reason: "AMINotFound", Empty: true, Err: err}
		}
	}
	var ids []string
	for _, q := range queries {
		out, err := p.clients.SSM.GetParameter(ctx, &ssm.GetParameterInput{Name: aws.String(q.Parameter)})
		var nf *ssmtypes.ParameterNotFound
		if errors.As(err, &nf) {
			continue
		}
		if err != nil {
			return nil, fail("resolving %s: reading SSM parameter %s: %w", what, q.Parameter, err)
		}
		id := aws.ToString(out.Parameter.Value)
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
		if q.Requirements != nil {
			known[id] = append(known[id], q.Requirements)
		}
	}
	return ids, nil
}

// amisFrom lists the images as a class's status does: newest first (by ID on a tie), deprecated
// when their deprecation time has come, each once for every requirement set it serves (AL2's
// GPU image: GPU and accelerator types, as Karpenter lists it), or for its architecture.
func amisFrom(imgs []foundImage, now time.Time) []awsv1.AMI {
	sort.Slice(imgs, func(i, j int) bool {
		if !imgs[i].created.Equal(imgs[j].created) {
			return imgs[i].created.After(imgs[j].created)
		}
		return aws.ToString(imgs[i].img.ImageId) < aws.ToString(imgs[j].img.ImageId)
	})
	var out []awsv1.AMI
	for _, f := range imgs {
		a := archOf(string(f.img.Architecture))
		deprecated := aws.ToString(f.img.DeprecationTime) != "" && !now.Before(parseTime(aws.ToString(f.img.DeprecationTime)))
		serves := f.serves
		if serves == nil {
			serves = [][]awsv1.AMIRequirement{{{Key: corev1.LabelArchStable, Operator: string(corev1.NodeSelectorOpIn), Values: []string{a}}}}
		}
		for _, reqs := range serves {
			out = append(out, awsv1.AMI{ID: aws.ToString(f.img.ImageId), Name: aws.ToString(f.img.Name), Deprecated: deprecated, Requirements: reqs})
		}
	}
	return out
}

func parseTime(s string) time.Time {
	t, _ := time.Parse(time.RFC3339, s)
	return t
}

// roleName is a role's name from spec.role, which may be a name, a path/name or an ARN.
func roleName(role string) string { return role[strings.LastIndex(role, "/")+1:] }

// InstanceProfileName is the instance profile Capstan manages for a class with spec.role: the
// cluster name and a hash of the region and class name, within IAM's 128 characters.
func InstanceProfileName(cluster, region, class string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(region + "/" + class))
	name := fmt.Sprintf("%s_%d", cluster, h.Sum64())
	if len(name) > 128 {
		name = name[len(name)-128:]
	}
	return name
}

// ResolveInstanceProfile returns the class's instance profile: spec.instanceProfile as it is
// (after checking that it exists), or the profile Capstan creates for spec.role, with the role
// attached.
func (p *Provider) ResolveInstanceProfile(ctx context.Context, nc *awsv1.EC2NodeClass) (string, error) {
	fail := func(format string, args ...any) error {
		return &ResolveError{Condition: awsv1.ConditionTypeInstanceProfileReady, Reason: "InstanceProfileNotReady", Err: fmt.Errorf(format, args...)}
	}
	if nc.Spec.InstanceProfile != nil {
		name := *nc.Spec.InstanceProfile
		if _, err := p.clients.IAM.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: aws.String(name)}); err != nil {
			return "", fail("instance profile %s: %w", name, err)
		}
		return name, nil
	}
	role := roleName(nc.Spec.Role)
	name := InstanceProfileName(p.opts.ClusterName, p.clients.Region, nc.Name)
	out, err := p.clients.IAM.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: aws.String(name)})
	var nse *iamtypes.NoSuchEntityException
	var profile *iamtypes.InstanceProfile
	switch {
	case errors.As(err, &nse):
		created, err := p.clients.IAM.CreateInstanceProfile(ctx, &iam.CreateInstanceProfileInput{InstanceProfileName: aws.String(name),
			Tags: []iamtypes.Tag{
				// The tags Karpenter's IAM policy asks of CreateInstanceProfile (cluster, EKS cluster
				// name, region, class), so a controller role made from its template works.
				{Key: aws.String("kubernetes.io/cluster/" + p.opts.ClusterName), Value: aws.String("owned")},
				{Key: aws.String(TagEKSClusterName), Value: aws.String(p.opts.ClusterName)},
				{Key: aws.String(awsv1.TagEC2NodeClass), Value: aws.String(nc.Name)},
				{Key: aws.String("karpenter.sh/managed-by"), Value: aws.String(p.opts.ClusterName)},
				{Key: aws.String(corev1.LabelTopologyRegion), Value: aws.String(p.clients.Region)},
			}})
		var exists *iamtypes.EntityAlreadyExistsException
		if errors.As(err, &exists) {
			// Another replica created it in between: read it.
			if out, err = p.clients.IAM.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: aws.String(name)}); err != nil {
				return "", fail("instance profile %s: %w", name, err)
			}
			profile = out.InstanceProfile
		} else if err != nil {
			return "", fail("creating instance profile %s for role %s: %w", name, role, err)
		} else {
			profile = created.InstanceProfile
		}
	case err != nil:
		return "", fail("instance profile %s: %w", name, err)
	default:
		profile = out.InstanceProfile
	}
	for _, r := range profile.Roles {
		if aws.ToString(r.RoleName) == role {
			return name, nil
		}
		// The class's role changed: an instance profile holds one role.
		if _, err := p.clients.IAM.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{
			InstanceProfileName: aws.String(name), RoleName: r.RoleName}); err != nil {
			return "", fail("removing role %s from instance profile %s: %w", aws.ToString(r.RoleName), name, err)
		}
	}
	if _, err := p.clients.IAM.AddRoleToInstanceProfile(ctx, &iam.AddRoleToInstanceProfileInput{
		InstanceProfileName: aws.String(name), RoleName: aws.String(role)}); err != nil {
		return "", fail("adding role %s to instance profile %s: %w", role, name, err)
	}
	return name, nil
}

// Cleanup deletes what Capstan made for a class that is going away: its launch templates and,
// when it gave a role, the instance profile it created. What is already gone is not an error.
func (p *Provider) Cleanup(ctx context.Context, nc *awsv1.EC2NodeClass) error {
	out, err := p.clients.EC2.DescribeLaunchTemplates(ctx, &ec2.DescribeLaunchTemplatesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + awsv1.TagEC2NodeClass), Values: []string{nc.Name}},
		{Name: aws.String("tag:karpenter.k8s.aws/cluster"), Values: []string{p.opts.ClusterName}},
	}})
	if err != nil {
		return fmt.Errorf("listing launch templates of EC2NodeClass %s: %w", nc.Name, err)
	}
	for _, lt := range out.LaunchTemplates {
		name := aws.ToString(lt.LaunchTemplateName)
		if _, err := p.clients.EC2.DeleteLaunchTemplate(ctx, &ec2.DeleteLaunchTemplateInput{LaunchTemplateName: lt.LaunchTemplateName}); err != nil &&
			!isCode(err, "InvalidLaunchTemplateName.NotFoundException") {
			return fmt.Errorf("deleting launch template %s: %w", name, err)
		}
		p.templates.forget(name)
	}
	if nc.Spec.Role == "" {
		return nil
	}
	name := InstanceProfileName(p.opts.ClusterName, p.clients.Region, nc.Name)
	got, err := p.clients.IAM.GetInstanceProfile(ctx, &iam.GetInstanceProfileInput{InstanceProfileName: aws.String(name)})
	var nse *iamtypes.NoSuchEntityException
	if errors.As(err, &nse) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("instance profile %s: %w", name, err)
	}
	for _, r := range got.InstanceProfile.Roles {
		if _, err := p.clients.IAM.RemoveRoleFromInstanceProfile(ctx, &iam.RemoveRoleFromInstanceProfileInput{
			InstanceProfileName: aws.String(name), RoleName: r.RoleName}); err != nil && !errors.As(err, &nse) {
			return fmt.Errorf("removing role %s from instance profile %s: %w", aws.ToString(r.RoleName), name, err)
		}
	}
	if _, err := p.clients.IAM.DeleteInstanceProfile(ctx, &iam.DeleteInstanceProfileInput{InstanceProfileName: aws.String(name)}); err != nil && !errors.As(err, &nse) {
		return fmt.Errorf("deleting instance profile %s: %w", name, err)
	}
	return nil
}
