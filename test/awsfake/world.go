package awsfake

import (
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"time"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/internal/catalog"
)

// Subnet is a VPC subnet.
type Subnet struct {
	ID, Zone, ZoneID, CIDR string
	AvailableIPs           int
	Tags                   map[string]string
}

// SecurityGroup is a security group.
type SecurityGroup struct {
	ID, Name string
	Tags     map[string]string
}

// Image is an AMI. Family is how its kubelet boots ("al2", "al2023", "bottlerocket",
// "windows2019", "windows2022", "windows2025"); an image without one boots as AL2023 (nodeadm),
// as custom images built on AL2023 do.
type Image struct {
	ID, Name, Owner, Architecture, Family string
	Created                               time.Time
	Deprecated                            bool
	Tags                                  map[string]string
}

// InstanceProfile is an IAM instance profile.
type InstanceProfile struct {
	Name, Path, ID string
	Roles          []string
	Tags           map[string]string
}

// LaunchTemplate is a launch template (one version).
type LaunchTemplate struct {
	ID, Name string
	Created  time.Time
	// Data is the template's LaunchTemplateData, as the request's flat keys without the prefix
	// (ImageId, UserData, MetadataOptions.HttpTokens, SecurityGroupId.1, …).
	Data map[string]string
	Tags map[string]string
}

// Instance is an EC2 instance.
type Instance struct {
	ID, Type, Zone, ZoneID, SubnetID, ImageID string
	// Lifecycle is "spot" or "on-demand".
	Lifecycle string
	// State is pending, running, shutting-down or terminated.
	State          string
	LaunchTime     time.Time
	TerminatedAt   time.Time
	PrivateIP      string
	PrivateDNS     string
	Tags           map[string]string
	LaunchTemplate string
	// Template is the launch template data the instance was launched with.
	Template map[string]string
	// FleetToken is the client token of the CreateFleet that launched it.
	FleetToken string
	// ReclaimAt is when a Spot interruption terminates it (zero: never).
	ReclaimAt time.Time
	// Health is what DescribeInstanceStatus reports of it.
	Health InstanceHealth
	// CapacityReservationID is the capacity reservation it was launched into, if any.
	CapacityReservationID string
}

// InstanceHealth is an instance's EC2 status checks and scheduled events.
type InstanceHealth struct {
	// InstanceImpairedSince and SystemImpairedSince, when set, fail the instance's and the
	// system's reachability check since then.
	InstanceImpairedSince, SystemImpairedSince time.Time
	// Events are scheduled event codes (system-maintenance, instance-retirement, …).
	Events []string
}

// SetInstanceHealth sets what DescribeInstanceStatus reports of an instance.
func (s *Server) SetInstanceHealth(id string, h InstanceHealth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if inst := s.instances[id]; inst != nil {
		inst.Health = h
	}
}

// ProviderID is the instance's Kubernetes provider ID.
func (i *Instance) ProviderID() string { return fmt.Sprintf("aws:///%s/%s", i.Zone, i.ID) }

// instanceType holds the facts DescribeInstanceTypes reports.
type instanceType struct {
	name, arch, manufacturer     string
	vcpus, memMiB                int64
	enis, ipsPerENI              int64
	clockGHz                     float64
	ebsMbps, networkMbps, nvmeGB int64
	encryption, current          bool
	hypervisor                   string
	gpuName, gpuManufacturer     string
	gpuCount, gpuMemMiB          int64
	neuronName                   string
	efa                          int64
	neuronCount, neuronCores     int64
	onDemand                     float64
}

// fromCatalog turns a catalog entry back into DescribeInstanceTypes facts. The pod capacity the
// catalog lists is the ENI formula's result; ENIs and IPs per ENI are chosen to give it back.
func fromCatalog(e catalog.Entry) (*instanceType, bool) {
	price, ok := e.OnDemandPriceUSD[catalog.Region]
	if !ok {
		return nil, false
	}
	num := func(k string) int64 { v, _ := strconv.ParseInt(e.Labels[k], 10, 64); return v }
	it := &instanceType{
		name: e.Name, arch: e.Labels["kubernetes.io/arch"], manufacturer: e.Labels[awsv1.LabelInstanceCPUManufacturer],
		vcpus: num(awsv1.LabelInstanceCPU), memMiB: num(awsv1.LabelInstanceMemory),
		clockGHz: float64(num(awsv1.LabelInstanceCPUSustainedClockSpeedMhz)) / 1000,
		ebsMbps:  num(awsv1.LabelInstanceEBSBandwidth), networkMbps: num(awsv1.LabelInstanceNetworkBandwidth),
		nvmeGB: num(awsv1.LabelInstanceLocalNVME), encryption: e.Labels[awsv1.LabelInstanceEncryptionInTransitSupported] == "true",
		hypervisor: e.Labels[awsv1.LabelInstanceHypervisor], current: true,
		gpuName: e.Labels[awsv1.LabelInstanceGPUName], gpuManufacturer: e.Labels[awsv1.LabelInstanceGPUManufacturer],
		gpuCount: num(awsv1.LabelInstanceGPUCount), gpuMemMiB: num(awsv1.LabelInstanceGPUMemory), onDemand: price,
	}
	if e.Labels[awsv1.LabelInstanceAcceleratorManufacturer] == "aws" {
		it.neuronName, it.neuronCount = e.Labels[awsv1.LabelInstanceAcceleratorName], num(awsv1.LabelInstanceAcceleratorCount)
		if cores, err := strconv.ParseInt(e.Allocatable["aws.amazon.com/neuroncore"], 10, 64); err == nil && it.neuronCount > 0 {
			it.neuronCores = cores / it.neuronCount
		}
	}
	it.efa, _ = strconv.ParseInt(e.Allocatable["vpc.amazonaws.com/efa"], 10, 64)
	pods, _ := strconv.ParseInt(e.Allocatable["pods"], 10, 64)
	it.enis, it.ipsPerENI = enisFor(pods)
	return it, true
}

// enisFor picks ENIs and IPv4 addresses per ENI whose ENI formula, enis×(ips−1)+2, is pods.
func enisFor(pods int64) (int64, int64) {
	if pods <= 2 {
		return 1, 2
	}
	for _, n := range []int64{3, 4, 2, 8, 15, 6, 7, 5, 12, 1} {
		if (pods-2)%n == 0 && (pods-2)/n+1 <= 50 {
			return n, (pods-2)/n + 1
		}
	}
	return 1, pods - 1
}

// ALVersion is the AL2023 image release the default world's "recommended" parameters point at;
// ALPreviousVersion is the one before.
// BottlerocketVersion is the Bottlerocket release the default world publishes.
const (
	ALVersion           = "v20261120"
	ALPreviousVersion   = "v20261020"
	BottlerocketVersion = "1.51.0"
)

func (s *Server) defaultWorld(o Options) {
	letters := []string{"a", "b", "c"}
	for i, l := range letters {
		z := Zone{Name: s.region + l, ID: fmt.Sprintf("use1-az%d", i+1)}
		s.zones = append(s.zones, z)
		id := fmt.Sprintf("subnet-0%d%s", i+1, strings.Repeat("a", 15))
		s.subnets[id] = &Subnet{ID: id, Zone: z.Name, ZoneID: z.ID, CIDR: fmt.Sprintf("10.0.%d.0/20", i*16), AvailableIPs: 4000,
			Tags: map[string]string{"karpenter.sh/discovery": o.ClusterName, "Name": "private-" + z.Name}}
	}
	s.subnets["subnet-0public000000000"] = &Subnet{ID: "subnet-0public000000000", Zone: s.zones[0].Name, ZoneID: s.zones[0].ID,
		CIDR: "10.0.128.0/20", AvailableIPs: 4000, Tags: map[string]string{"Name": "public-" + s.zones[0].Name}}
	s.groups["sg-0nodes00000000001"] = &SecurityGroup{ID: "sg-0nodes00000000001", Name: "eks-cluster-sg-" + o.ClusterName,
		Tags: map[string]string{"karpenter.sh/discovery": o.ClusterName}}
	s.groups["sg-0other00000000001"] = &SecurityGroup{ID: "sg-0other00000000001", Name: "default", Tags: map[string]string{}}
	s.roles["KarpenterNodeRole-"+o.ClusterName] = true
	n := 0
	image := func(name, arch, family, release string, params ...string) {
		n++
		id := fmt.Sprintf("ami-0%016d", n)
		created, err := time.Parse("v20060102", release)
		if err != nil {
			created = time.Date(2026, 11, 12, 0, 0, 0, 0, time.UTC)
		}
		s.images[id] = &Image{ID: id, Name: name, Owner: "602401143452", Architecture: arch, Family: family, Created: created, Tags: map[string]string{}}
		for _, p := range params {
			s.params[p] = id
		}
	}
	// AL2023 standard images first (their ids are the ones tests have always seen).
	for _, v := range o.KubernetesVersions {
		for _, release := range []string{ALPreviousVersion, ALVersion} {
			for _, arch := range []string{"x86_64", "arm64"} {
				name := fmt.Sprintf("amazon-eks-node-al2023-%s-standard-%s-%s", arch, v, release)
				base := fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/standard/", v, arch)
				params := []string{base + name + "/image_id"}
				if release == ALVersion {
					params = append(params, base+"recommended/image_id")
				}
				image(name, arch, "al2023", release, params...)
			}
		}
	}
	for _, v := range o.KubernetesVersions {
		// AL2023's GPU (NVIDIA, both architectures) and Neuron (x86_64) images.
		for _, av := range [][2]string{{"x86_64", "nvidia"}, {"arm64", "nvidia"}, {"x86_64", "neuron"}} {
			name := fmt.Sprintf("amazon-eks-node-al2023-%s-%s-%s-%s", av[0], av[1], v, ALVersion)
			base := fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/%s/", v, av[0], av[1])
			image(name, av[0], "al2023", ALVersion, base+name+"/image_id", base+"recommended/image_id")
		}
		// Bottlerocket, standard and NVIDIA, both architectures.
		for _, flavour := range []string{"", "-nvidia"} {
			for _, arch := range []string{"x86_64", "arm64"} {
				name := fmt.Sprintf("bottlerocket-aws-k8s-%s%s-%s-v%s", v, flavour, arch, BottlerocketVersion)
				base := fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s%s/%s/", v, flavour, arch)
				image(name, arch, "bottlerocket", ALVersion, base+BottlerocketVersion+"/image_id", base+"latest/image_id")
			}
		}
		// Windows Server Core, x86_64 only.
		for _, year := range []string{"2019", "2022", "2025"} {
			name := fmt.Sprintf("Windows_Server-%s-English-Core-EKS_Optimized-%s-2026.11.12", year, v)
			image(name, "x86_64", "windows"+year, ALVersion,
				fmt.Sprintf("/aws/service/ami-windows-latest/Windows_Server-%s-English-Core-EKS_Optimized-%s/image_id", year, v))
		}
	}
	// AL2, published up to Kubernetes 1.32.
	for _, v := range []string{"1.31", "1.32"} {
		for _, d := range [][3]string{{"amazon-linux-2", "amazon-eks-node", "x86_64"}, {"amazon-linux-2-gpu", "amazon-eks-gpu-node", "x86_64"},
			{"amazon-linux-2-arm64", "amazon-eks-arm64-node", "arm64"}} {
			name := fmt.Sprintf("%s-%s-%s", d[1], v, ALVersion)
			base := fmt.Sprintf("/aws/service/eks/optimized-ami/%s/%s/", v, d[0])
			image(name, d[2], "al2", ALVersion, base+name+"/image_id", base+"recommended/image_id")
		}
	}
}

// Zones are the region's zones.
func (s *Server) Zones() []Zone { return s.zones }

// AddSubnet adds a subnet.
func (s *Server) AddSubnet(sn Subnet) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subnets[sn.ID] = &sn
}

// AddSecurityGroup adds a security group.
func (s *Server) AddSecurityGroup(g SecurityGroup) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.groups[g.ID] = &g
}

// AddImage adds an image.
func (s *Server) AddImage(im Image) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[im.ID] = &im
}

// ImageByName returns the image named name.
func (s *Server) ImageByName(name string) (Image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, im := range s.images {
		if im.Name == name {
			return *im, true
		}
	}
	return Image{}, false
}

// SetParameter sets an SSM parameter.
func (s *Server) SetParameter(name, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.params[name] = value
}

// Parameter reads an SSM parameter.
func (s *Server) Parameter(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.params[name]
}

// AddRole makes an IAM role exist.
func (s *Server) AddRole(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roles[name] = true
}

// InstanceProfiles are the instance profiles, by name.
func (s *Server) InstanceProfiles() map[string]InstanceProfile {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]InstanceProfile{}
	for k, v := range s.profiles {
		out[k] = *v
	}
	return out
}

func capacityKey(instanceType, zone, lifecycle string) string {
	return instanceType + "/" + zone + "/" + lifecycle
}

// SetInsufficientCapacity makes launches of an offering fail (or succeed again) with
// InsufficientInstanceCapacity; an empty zone means every zone.
func (s *Server) SetInsufficientCapacity(instanceType, zone, lifecycle string, short bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	zones := []string{zone}
	if zone == "" {
		zones = nil
		for _, z := range s.zones {
			zones = append(zones, z.Name)
		}
	}
	for _, z := range zones {
		if short {
			s.noCapacity[capacityKey(instanceType, z, lifecycle)] = true
		} else {
			delete(s.noCapacity, capacityKey(instanceType, z, lifecycle))
		}
	}
}

// Instances are the instances (terminated ones too, as EC2 lists them for a while), sorted by
// launch time.
func (s *Server) Instances() []Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Instance, 0, len(s.instances))
	for _, i := range s.instances {
		c := *i
		c.Tags, c.Template = maps.Clone(i.Tags), maps.Clone(i.Template)
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool {
		if !out[a].LaunchTime.Equal(out[b].LaunchTime) {
			return out[a].LaunchTime.Before(out[b].LaunchTime)
		}
		return out[a].ID < out[b].ID
	})
	return out
}

// LiveInstances are the instances not terminated or shutting down whose tag key has value.
func (s *Server) LiveInstances(tagKey, value string) []Instance {
	var out []Instance
	for _, i := range s.Instances() {
		if (i.State == "pending" || i.State == "running") && (tagKey == "" || i.Tags[tagKey] == value) {
			out = append(out, i)
		}
	}
	return out
}

// LaunchTemplates are the launch templates, by name.
func (s *Server) LaunchTemplates() map[string]LaunchTemplate {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]LaunchTemplate{}
	for k, v := range s.templates {
		out[k] = *v
	}
	return out
}

// spotFraction is a type's spot price as a fraction of on-demand in a zone (stable).
var spotFraction = catalog.StableSpotFraction(0.30, 0.45)

func (it *instanceType) spotPrice(zone string) float64 {
	return it.onDemand * spotFraction(it.name, zone)
}

// RunInstance adds a running instance as if launched outside Capstan's view (a launch whose
// NodeClaim was lost); its ID, zone and times are filled in.
func (s *Server) RunInstance(inst Instance) Instance {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	inst.ID = newID("i-")
	if inst.Zone == "" {
		inst.Zone, inst.ZoneID = s.zones[0].Name, s.zones[0].ID
	}
	if inst.Lifecycle == "" {
		inst.Lifecycle = "on-demand"
	}
	inst.State, inst.LaunchTime = "running", s.clock.Now()
	inst.PrivateIP = fmt.Sprintf("10.0.%d.%d", s.seq/250, s.seq%250+1)
	inst.PrivateDNS = "ip-" + strings.ReplaceAll(inst.PrivateIP, ".", "-") + ".ec2.internal"
	c := inst
	s.instances[inst.ID] = &c
	return inst
}

// ImageByID returns the image with this id.
func (s *Server) ImageByID(id string) (Image, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if im := s.images[id]; im != nil {
		return *im, true
	}
	return Image{}, false
}
