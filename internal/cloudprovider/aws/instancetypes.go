package aws

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
)

// typeLabels are the labels a machine of the type carries.
func typeLabels(info ec2types.InstanceTypeInfo) map[string]string {
	name := string(info.InstanceType)
	family, size, _ := strings.Cut(name, ".")
	l := map[string]string{
		corev1.LabelInstanceTypeStable: name,
		corev1.LabelOSStable:           "linux",
		awsv1.LabelInstanceFamily:      family,
		awsv1.LabelInstanceSize:        size,
		awsv1.LabelInstanceHypervisor:  string(info.Hypervisor),
	}
	if pi := info.ProcessorInfo; pi != nil {
		if len(pi.SupportedArchitectures) > 0 {
			l[corev1.LabelArchStable] = archOf(string(pi.SupportedArchitectures[0]))
		}
		if pi.Manufacturer != nil {
			l[awsv1.LabelInstanceCPUManufacturer] = strings.ToLower(aws.ToString(pi.Manufacturer))
		}
		if pi.SustainedClockSpeedInGhz != nil {
			l[awsv1.LabelInstanceCPUSustainedClockSpeedMhz] = strconv.FormatInt(int64(math.Round(aws.ToFloat64(pi.SustainedClockSpeedInGhz)*1000)), 10)
		}
	}
	// Category and generation: the family's leading letters and the digits after them, past a
	// memory size segment ("u-6tb1": u, 1).
	if m := familyRE.FindStringSubmatch(family); m != nil {
		l[awsv1.LabelInstanceCategory], l[awsv1.LabelInstanceGeneration] = m[1], m[2]
	}
	l[awsv1.LabelInstanceCapabilityFlex] = strconv.FormatBool(strings.Contains(family, "flex"))
	if v := info.VCpuInfo; v != nil {
		l[awsv1.LabelInstanceCPU] = strconv.FormatInt(int64(aws.ToInt32(v.DefaultVCpus)), 10)
	}
	if mi := info.MemoryInfo; mi != nil {
		l[awsv1.LabelInstanceMemory] = strconv.FormatInt(aws.ToInt64(mi.SizeInMiB), 10)
	}
	if eb := info.EbsInfo; eb != nil && eb.EbsOptimizedInfo != nil {
		l[awsv1.LabelInstanceEBSBandwidth] = strconv.FormatInt(int64(aws.ToInt32(eb.EbsOptimizedInfo.MaximumBandwidthInMbps)), 10)
	}
	if ni := info.NetworkInfo; ni != nil {
		if len(ni.NetworkCards) > 0 && ni.NetworkCards[0].BaselineBandwidthInGbps != nil {
			l[awsv1.LabelInstanceNetworkBandwidth] = strconv.FormatInt(int64(math.Round(aws.ToFloat64(ni.NetworkCards[0].BaselineBandwidthInGbps)*1000)), 10)
		}
		l[awsv1.LabelInstanceEncryptionInTransitSupported] = strconv.FormatBool(aws.ToBool(ni.EncryptionInTransitSupported))
	}
	if si := info.InstanceStorageInfo; si != nil && si.TotalSizeInGB != nil && si.NvmeSupport != ec2types.EphemeralNvmeSupportUnsupported {
		l[awsv1.LabelInstanceLocalNVME] = strconv.FormatInt(aws.ToInt64(si.TotalSizeInGB), 10)
	}
	if ni := info.NeuronInfo; ni != nil && len(ni.NeuronDevices) > 0 {
		d := ni.NeuronDevices[0]
		l[awsv1.LabelInstanceAcceleratorName] = strings.ToLower(aws.ToString(d.Name))
		l[awsv1.LabelInstanceAcceleratorManufacturer] = "aws"
		l[awsv1.LabelInstanceAcceleratorCount] = strconv.FormatInt(int64(aws.ToInt32(d.Count)), 10)
	}
	if gi := info.GpuInfo; gi != nil && len(gi.Gpus) > 0 {
		g := gi.Gpus[0]
		l[awsv1.LabelInstanceGPUName] = strings.ToLower(aws.ToString(g.Name))
		l[awsv1.LabelInstanceGPUManufacturer] = strings.ToLower(aws.ToString(g.Manufacturer))
		l[awsv1.LabelInstanceGPUCount] = strconv.FormatInt(int64(aws.ToInt32(g.Count)), 10)
		if g.MemoryInfo != nil {
			l[awsv1.LabelInstanceGPUMemory] = strconv.FormatInt(int64(aws.ToInt32(g.MemoryInfo.SizeInMiB)), 10)
		}
	}
	return l
}

// familyRE reads an instance family: category letters, an optional "-<n>tb" memory segment,
// generation digits.
var familyRE = regexp.MustCompile(`^([a-z]+)(?:-[0-9]+tb)?([0-9]+)`)

// ENILimitedPods is the pod capacity the VPC CNI gives a type without prefix delegation, with
// reservedENIs interfaces kept from it: (ENIs − reserved) × (IPv4 addresses per ENI − 1) + 2.
func ENILimitedPods(info ec2types.InstanceTypeInfo, reservedENIs int) int64 {
	ni := info.NetworkInfo
	if ni == nil {
		return 110
	}
	enis := max(int64(aws.ToInt32(ni.MaximumNetworkInterfaces))-int64(reservedENIs), 0)
	return enis*(int64(aws.ToInt32(ni.Ipv4AddressesPerInterface))-1) + 2
}

// rootVolume is the size of the volume holding the node's ephemeral storage: the class's
// mapping marked rootVolume, else its mapping of the family's ephemeral device, else its first
// mapping; without mappings, the family's default volume.
func rootVolume(nc *awsv1.EC2NodeClass) resource.Quantity {
	f := amifamily.Of(&nc.Spec)
	var pick *awsv1.BlockDeviceMapping
	for i := range nc.Spec.BlockDeviceMappings {
		b := &nc.Spec.BlockDeviceMappings[i]
		switch {
		case b.RootVolume:
			pick = b
		case pick == nil, !pick.RootVolume && b.DeviceName != nil && *b.DeviceName == f.EphemeralDevice():
			pick = b
		}
	}
	if pick != nil && pick.EBS != nil && pick.EBS.VolumeSize != nil {
		return pick.EBS.VolumeSize.DeepCopy()
	}
	v := f.DefaultVolumes()
	return *resource.NewQuantity(int64(v[len(v)-1].SizeGiB)<<30, resource.BinarySI)
}

// Reserved is what a node's kubelet keeps from pods: kube-reserved, system-reserved and the hard
// eviction thresholds, as nodeadm sets them from the instance type (EKS's formulas) unless the
// class's kubelet settings, which Capstan writes into the user data, say otherwise — so the
// Node's allocatable is the NodeClaim's.
type Reserved struct {
	MaxPods        int64
	KubeReserved   corev1.ResourceList
	SystemReserved corev1.ResourceList
	// EvictionHard are the thresholds as the kubelet reads them (memory.available: 100Mi,
	// nodefs.available: 10%).
	EvictionHard map[string]string
}

// kubeReservedCPU is EKS's kube-reserved CPU: 6% of the first core, 1% of the second, 0.5% of
// the third and fourth, 0.25% of every core above four.
func kubeReservedCPU(vcpus int64) int64 {
	milli := 0.0
	for c := int64(1); c <= vcpus; c++ {
		switch {
		case c == 1:
			milli += 60
		case c == 2:
			milli += 10
		case c <= 4:
			milli += 5
		default:
			milli += 2.5
		}
	}
	return int64(math.Round(milli))
}

// reserved computes a type's Reserved under the class's kubelet settings.
func (p *Provider) reserved(info ec2types.InstanceTypeInfo, nc *awsv1.EC2NodeClass) Reserved {
	vcpus := int64(aws.ToInt32(info.VCpuInfo.DefaultVCpus))
	pods := ENILimitedPods(info, p.opts.ReservedENIs)
	k := nc.Spec.Kubelet
	if k != nil && k.MaxPods != nil {
		pods = int64(*k.MaxPods)
	}
	if k != nil && k.PodsPerCore != nil && *k.PodsPerCore > 0 {
		pods = min(pods, int64(*k.PodsPerCore)*vcpus)
	}
	r := Reserved{MaxPods: pods,
		KubeReserved: corev1.ResourceList{
			corev1.ResourceCPU:              *resource.NewMilliQuantity(kubeReservedCPU(vcpus), resource.DecimalSI),
			corev1.ResourceMemory:           *resource.NewQuantity((11*pods+255)<<20, resource.BinarySI),
			corev1.ResourceEphemeralStorage: resource.MustParse("1Gi"),
		},
		SystemReserved: corev1.ResourceList{},
		EvictionHard:   map[string]string{"memory.available": "100Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%"},
	}
	if k == nil {
		return r
	}
	for name, v := range k.KubeReserved {
		if q, err := resource.ParseQuantity(string(v)); err == nil && name != "pid" {
			r.KubeReserved[corev1.ResourceName(name)] = q
		}
	}
	for name, v := range k.SystemReserved {
		if q, err := resource.ParseQuantity(string(v)); err == nil && name != "pid" {
			r.SystemReserved[corev1.ResourceName(name)] = q
		}
	}
	for signal, v := range k.EvictionHard {
		r.EvictionHard[signal] = string(v)
	}
	return r
}

// threshold is an eviction threshold's amount of total: a quantity or a percentage.
func threshold(v string, total resource.Quantity) resource.Quantity {
	if pct, ok := strings.CutSuffix(v, "%"); ok {
		f, err := strconv.ParseFloat(pct, 64)
		if err != nil {
			return resource.Quantity{}
		}
		return *resource.NewQuantity(int64(math.Ceil(float64(total.Value())*f/100)), resource.BinarySI)
	}
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return resource.Quantity{}
	}
	return q
}

// GravitonCMAMiB is the memory the Linux kernel of a Graviton (arm64) machine sets aside for its
// contiguous memory allocator before the kubelet sees any (Karpenter's aws#3937): its Node's
// capacity, and so its allocatable, is that much smaller than the same size of x86 machine's.
const GravitonCMAMiB = 64

// Capacity is a type's capacity on a class's nodes: vCPUs, memory less a Graviton's CMA
// (GravitonCMAMiB) and the hypervisor's share (VMMemoryOverheadPercent), pods, the root volume,
// GPUs.
func (p *Provider) Capacity(info ec2types.InstanceTypeInfo, nc *awsv1.EC2NodeClass, r Reserved) corev1.ResourceList {
	mib := aws.ToInt64(info.MemoryInfo.SizeInMiB)
	if info.ProcessorInfo != nil && slices.Contains(info.ProcessorInfo.SupportedArchitectures, ec2types.ArchitectureTypeArm64) {
		mib -= GravitonCMAMiB
	}
	mem := mib - int64(math.Ceil(float64(mib)*p.opts.VMMemoryOverheadPercent))
	c := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(aws.ToInt32(info.VCpuInfo.DefaultVCpus)), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(r.MaxPods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: rootVolume(nc),
	}
	if gi := info.GpuInfo; gi != nil {
		for _, g := range gi.Gpus {
			if aws.ToInt32(g.Count) == 0 {
				// A fractional GPU (g6f) is not a schedulable device.
				continue
			}
			switch strings.ToLower(aws.ToString(g.Manufacturer)) {
			case "nvidia":
				c["nvidia.com/gpu"] = *resource.NewQuantity(int64(aws.ToInt32(g.Count)), resource.DecimalSI)
			case "amd":
				c["amd.com/gpu"] = *resource.NewQuantity(int64(aws.ToInt32(g.Count)), resource.DecimalSI)
			}
		}
	}
	if ni := info.NetworkInfo; ni != nil && ni.EfaInfo != nil && aws.ToInt32(ni.EfaInfo.MaximumEfaInterfaces) > 0 {
		c["vpc.amazonaws.com/efa"] = *resource.NewQuantity(int64(aws.ToInt32(ni.EfaInfo.MaximumEfaInterfaces)), resource.DecimalSI)
	}
	if ni := info.NeuronInfo; ni != nil {
		var devices, cores int64
		for _, d := range ni.NeuronDevices {
			n := int64(aws.ToInt32(d.Count))
			devices += n
			if d.CoreInfo != nil {
				cores += n * int64(aws.ToInt32(d.CoreInfo.Count))
			}
		}
		if devices > 0 {
			c["aws.amazon.com/neuron"] = *resource.NewQuantity(devices, resource.DecimalSI)
			c["aws.amazon.com/neuroncore"] = *resource.NewQuantity(cores, resource.DecimalSI)
		}
	}
	return c
}

// Overhead is kube-reserved + system-reserved + the hard eviction thresholds.
func Overhead(capacity corev1.ResourceList, r Reserved) corev1.ResourceList {
	o := corev1.ResourceList{}
	add := func(name corev1.ResourceName, q resource.Quantity) {
		cur := o[name]
		cur.Add(q)
		o[name] = cur
	}
	for name, q := range r.KubeReserved {
		add(name, q)
	}
	for name, q := range r.SystemReserved {
		add(name, q)
	}
	if v, ok := r.EvictionHard["memory.available"]; ok {
		add(corev1.ResourceMemory, threshold(v, capacity[corev1.ResourceMemory]))
	}
	if v, ok := r.EvictionHard["nodefs.available"]; ok {
		add(corev1.ResourceEphemeralStorage, threshold(v, capacity[corev1.ResourceEphemeralStorage]))
	}
	return o
}

// buildTypes computes the class's instance types from the market: types of an architecture the
// class has an image for, offered in the zones of its subnets, with on-demand and spot offerings
// priced (a type without a price is left out: the solver could not weigh it).
func (p *Provider) buildTypes(m *market, nc *awsv1.EC2NodeClass) []*cloudprovider.InstanceType {
	family := amifamily.Of(&nc.Spec)
	zones := map[string]bool{}
	for _, s := range nc.Status.Subnets {
		zones[s.Zone] = true
	}
	var out []*cloudprovider.InstanceType
	for _, info := range m.types {
		name := string(info.InstanceType)
		labels := typeLabels(info)
		labels[corev1.LabelOSStable] = family.OS()
		if b := family.WindowsBuild(); b != "" {
			labels[corev1.LabelWindowsBuild] = b
		}
		if !slices.ContainsFunc(nc.Status.AMIs, func(a awsv1.AMI) bool { return amifamily.Serves(a.Requirements, labels) }) ||
			info.VCpuInfo == nil || info.MemoryInfo == nil {
			continue
		}
		od, ok := m.onDemand[name]
		if !ok {
			continue
		}
		var offerings []cloudprovider.Offering
		for _, z := range slices.Sorted(maps.Keys(zones)) {
			if !m.zones[name][z] {
				continue
			}
			for _, class := range info.SupportedUsageClasses {
				switch class {
				case ec2types.UsageClassTypeOnDemand:
					offerings = append(offerings, cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeOnDemand, Price: od, Available: true})
				case ec2types.UsageClassTypeSpot:
					// Before the spot price history was ever read, the on-demand price stands in
					// (never cheaper than the truth); once read, a pool without a price is not
					// offered.
					sp, ok := m.spot[name][z]
					if !ok && m.spot != nil {
						continue
					}
					if !ok {
						sp = od
					}
					offerings = append(offerings, cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeSpot, Price: sp, Available: true})
				}
			}
		}
		if len(offerings) == 0 {
			continue
		}
		r := p.reserved(info, nc)
		capacity := p.Capacity(info, nc, r)
		it := cloudprovider.NewInstanceType(name, labels, capacity, Overhead(capacity, r), offerings)
		if n, ok := EBSVolumeLimit(info, nc); ok {
			it.VolumeLimits = map[string]int64{EBSCSIDriver: n}
		}
		out = append(out, it)
	}
	return out
}

// EBSCSIDriver is the Amazon EBS CSI driver's name: the driver of the volume limit AWS instance
// types carry.
const EBSCSIDriver = "ebs.csi.aws.com"

// EBSVolumeLimit is how many EBS volumes pods can attach on a new machine of the type with the
// class, as the EBS CSI driver will publish on its CSINode: the type's EBS attachments
// (DescribeInstanceTypes' MaximumEbsAttachments) less the class's block devices (the root volume
// when it names none); where the type shares that limit with its other attachments (Nitro's
// "shared"), less the primary network interface and the instance-store volumes too. ok is false
// when EC2 gives no limit: the type is then not limited here (the node's CSINode still bounds it
// once it exists). Network interfaces the VPC CNI attaches later lower the driver's figure
// further on shared types; Capstan does not predict them.
func EBSVolumeLimit(info ec2types.InstanceTypeInfo, nc *awsv1.EC2NodeClass) (int64, bool) {
	eb := info.EbsInfo
	if eb == nil || eb.MaximumEbsAttachments == nil {
		return 0, false
	}
	n := int64(aws.ToInt32(eb.MaximumEbsAttachments)) - int64(max(1, len(nc.Spec.BlockDeviceMappings)))
	if eb.AttachmentLimitType == ec2types.AttachmentLimitTypeShared {
		n--
		if si := info.InstanceStorageInfo; si != nil {
			for _, d := range si.Disks {
				n -= int64(aws.ToInt32(d.Count))
			}
		}
	}
	return max(n, 0), true
}
