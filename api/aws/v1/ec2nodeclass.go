package v1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// EC2NodeClassSpec is how machines are launched on AWS.
//
// +kubebuilder:validation:XValidation:rule="has(self.role) != has(self.instanceProfile)",message="must specify exactly one of ['role', 'instanceProfile']"
// +kubebuilder:validation:XValidation:rule="(has(oldSelf.role) && has(self.role)) || (has(oldSelf.instanceProfile) && has(self.instanceProfile))",message="changing from 'role' to 'instanceProfile' or back is not supported; create a new EC2NodeClass instead"
// +kubebuilder:validation:XValidation:rule="has(self.amiFamily) || self.amiSelectorTerms.exists(t, has(t.alias))",message="amiFamily is required if amiSelectorTerms does not specify an alias"
// +kubebuilder:validation:XValidation:rule="!has(self.amiFamily) || self.amiFamily == 'Custom' || self.amiSelectorTerms.all(t, !has(t.alias) || t.alias.split('@')[0] == self.amiFamily.lowerAscii())",message="if set, amiFamily must be 'Custom' or the family of the alias"
type EC2NodeClassSpec struct {
	// SubnetSelectorTerms select the subnets machines launch into; terms are ORed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +required
	SubnetSelectorTerms []SubnetSelectorTerm `json:"subnetSelectorTerms"`
	// SecurityGroupSelectorTerms select the security groups of machines; terms are ORed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +required
	SecurityGroupSelectorTerms []SecurityGroupSelectorTerm `json:"securityGroupSelectorTerms"`
	// AssociatePublicIPAddress overrides the subnet's public-IP setting.
	// +optional
	AssociatePublicIPAddress *bool `json:"associatePublicIPAddress,omitempty"`
	// AMISelectorTerms select the images machines boot; terms are ORed.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=30
	// +kubebuilder:validation:XValidation:rule="!self.exists(t, has(t.alias)) || size(self) == 1",message="'alias' is mutually exclusive, cannot be set with a combination of other amiSelectorTerms"
	// +required
	AMISelectorTerms []AMISelectorTerm `json:"amiSelectorTerms"`
	// AMIFamily is the image family, which decides the bootstrap format of the user data.
	// +kubebuilder:validation:Enum=AL2;AL2023;Bottlerocket;Custom;Windows2019;Windows2022;Windows2025
	// +optional
	AMIFamily *string `json:"amiFamily,omitempty"`
	// UserData is merged with the bootstrap user data of the AMI family.
	// +kubebuilder:validation:MaxLength=65536
	// +optional
	UserData *string `json:"userData,omitempty"`
	// Role is the IAM role of the machines; Capstan manages an instance profile for it. Changing
	// it drifts the machines.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Role string `json:"role,omitempty"`
	// InstanceProfile is an existing instance profile of the machines.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +optional
	InstanceProfile *string `json:"instanceProfile,omitempty"`
	// Tags are put on every resource Capstan creates for the machines.
	// +kubebuilder:validation:MaxProperties=50
	// +kubebuilder:validation:XValidation:rule="self.all(k, size(k) > 0 && size(k) <= 128)",message="empty tag keys aren't supported and tag keys are at most 128 characters"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'eks:eks-cluster-name')",message="tag contains a restricted tag matching eks:eks-cluster-name"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('kubernetes.io/cluster'))",message="tag contains a restricted tag matching kubernetes.io/cluster/"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'karpenter.sh/nodepool')",message="tag contains a restricted tag matching karpenter.sh/nodepool"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'karpenter.sh/nodeclaim')",message="tag contains a restricted tag matching karpenter.sh/nodeclaim"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'karpenter.k8s.aws/ec2nodeclass')",message="tag contains a restricted tag matching karpenter.k8s.aws/ec2nodeclass"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// Kubelet overrides the kubelet settings of the machines.
	// +optional
	Kubelet *KubeletConfiguration `json:"kubelet,omitempty"`
	// BlockDeviceMappings are the volumes of the machines.
	// +kubebuilder:validation:MaxItems=50
	// +kubebuilder:validation:XValidation:rule="self.filter(x, has(x.rootVolume) && x.rootVolume).size() <= 1",message="must have only one blockDeviceMappings with rootVolume"
	// +optional
	BlockDeviceMappings []BlockDeviceMapping `json:"blockDeviceMappings,omitempty"`
	// InstanceStorePolicy says how local NVMe instance stores are used.
	// +kubebuilder:validation:Enum=RAID0
	// +optional
	InstanceStorePolicy *InstanceStorePolicy `json:"instanceStorePolicy,omitempty"`
	// DetailedMonitoring turns on one-minute CloudWatch metrics for the machines.
	// +optional
	DetailedMonitoring *bool `json:"detailedMonitoring,omitempty"`
	// MetadataOptions are the instance metadata service settings; IMDSv2 is required by default.
	// +kubebuilder:default:={"httpEndpoint":"enabled","httpProtocolIPv6":"disabled","httpPutResponseHopLimit":1,"httpTokens":"required"}
	// +optional
	MetadataOptions *MetadataOptions `json:"metadataOptions,omitempty"`
	// Context is the reservation context passed to CreateFleet.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Context *string `json:"context,omitempty"`
	// CapacityReservationSelectorTerms select the capacity reservations machines may launch into;
	// terms are ORed.
	// +kubebuilder:validation:MaxItems=30
	// +optional
	CapacityReservationSelectorTerms []CapacityReservationSelectorTerm `json:"capacityReservationSelectorTerms,omitempty"`
	// PlacementGroupSelector names the placement group machines launch into.
	// +optional
	PlacementGroupSelector *PlacementGroupSelector `json:"placementGroupSelector,omitempty"`
	// IPPrefixCount is the number of IPv4 prefixes assigned to the primary network interface.
	// +kubebuilder:validation:Minimum=0
	// +optional
	IPPrefixCount *int32 `json:"ipPrefixCount,omitempty"`
	// NetworkInterfaces are the network interfaces attached at launch; when set, one of them is the
	// primary (network card 0, device 0, type interface).
	// +kubebuilder:validation:MaxItems=150
	// +kubebuilder:validation:XValidation:message="networkInterfaces must include a primary interface with interfaceType='interface'",rule="size(self) == 0 || self.exists(n, n.networkCardIndex == 0 && n.deviceIndex == 0 && n.interfaceType == 'interface')"
	// +kubebuilder:validation:XValidation:message="networkInterfaces must not have duplicate networkCardIndex and deviceIndex pairs, and can have at most one efa device per network card",rule="self.all(n, size(self.filter(m, m.networkCardIndex == n.networkCardIndex && m.deviceIndex == n.deviceIndex)) == 1 && (n.interfaceType != 'efa-only' || size(self.filter(m, m.networkCardIndex == n.networkCardIndex && m.interfaceType == 'efa-only')) == 1))"
	// +optional
	NetworkInterfaces []NetworkInterface `json:"networkInterfaces,omitempty"`
	// EnclaveOptions turns on AWS Nitro Enclaves, which limits the instance types to those
	// supporting them.
	// +optional
	EnclaveOptions *EnclaveOptions `json:"enclaveOptions,omitempty"`
	// ConnectionTracking sets the idle connection-tracking timeouts of the interfaces Capstan
	// attaches at launch.
	// +optional
	ConnectionTracking *ConnectionTracking `json:"connectionTracking,omitempty"`
	// CPUOptions are the processor settings of the machines.
	// +optional
	CPUOptions *CPUOptions `json:"cpuOptions,omitempty"`
}

// SubnetSelectorTerm selects subnets by id or by tags.
//
// +kubebuilder:validation:XValidation:message="expected at least one, got none, ['tags', 'id']",rule="has(self.tags) || has(self.id)"
// +kubebuilder:validation:XValidation:message="'id' is mutually exclusive, cannot be set with a combination of other fields in a subnet selector term",rule="!(has(self.id) && has(self.tags))"
type SubnetSelectorTerm struct {
	// Tags select subnets having all of these tags; "*" matches any value.
	// +optional
	Tags SelectorTags `json:"tags,omitempty"`
	// ID is a subnet id.
	// +kubebuilder:validation:Pattern=`^subnet-[0-9a-z]+$`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ID string `json:"id,omitempty"`
}

// SecurityGroupSelectorTerm selects security groups by id, name or tags.
//
// +kubebuilder:validation:XValidation:message="expected at least one, got none, ['tags', 'id', 'name']",rule="has(self.tags) || has(self.id) || has(self.name)"
// +kubebuilder:validation:XValidation:message="'id' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",rule="!has(self.id) || !(has(self.tags) || has(self.name))"
// +kubebuilder:validation:XValidation:message="'name' is mutually exclusive, cannot be set with a combination of other fields in a security group selector term",rule="!has(self.name) || !(has(self.tags) || has(self.id))"
type SecurityGroupSelectorTerm struct {
	// Tags select security groups having all of these tags; "*" matches any value.
	// +optional
	Tags SelectorTags `json:"tags,omitempty"`
	// ID is a security group id.
	// +kubebuilder:validation:Pattern=`^sg-[0-9a-z]+$`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ID string `json:"id,omitempty"`
	// Name is a security group name.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Name string `json:"name,omitempty"`
}

// AMISelectorTerm selects images by alias, id, name (and owner), tags or SSM parameter.
//
// +kubebuilder:validation:XValidation:message="expected at least one, got none, ['tags', 'id', 'name', 'alias', 'ssmParameter']",rule="has(self.tags) || has(self.id) || has(self.name) || has(self.alias) || has(self.ssmParameter)"
// +kubebuilder:validation:XValidation:message="'id' is mutually exclusive, cannot be set with a combination of other fields in an AMI selector term",rule="!has(self.id) || !(has(self.tags) || has(self.name) || has(self.alias) || has(self.owner) || has(self.ssmParameter))"
// +kubebuilder:validation:XValidation:message="'alias' is mutually exclusive, cannot be set with a combination of other fields in an AMI selector term",rule="!has(self.alias) || !(has(self.tags) || has(self.name) || has(self.id) || has(self.owner) || has(self.ssmParameter))"
// +kubebuilder:validation:XValidation:message="'owner' requires 'name' or 'tags'",rule="!has(self.owner) || has(self.name) || has(self.tags)"
type AMISelectorTerm struct {
	// Alias selects the latest or a pinned image of a family, as family@version (al2023@latest,
	// bottlerocket@v1.20.0).
	// +kubebuilder:validation:MaxLength=30
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]+@.+$`
	// +kubebuilder:validation:XValidation:message="family is not supported, must be one of the following: 'al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025'",rule="self.split('@')[0] in ['al2', 'al2023', 'bottlerocket', 'windows2019', 'windows2022', 'windows2025']"
	// +kubebuilder:validation:XValidation:message="windows families may only specify version 'latest'",rule="!self.split('@')[0].startsWith('windows') || self.split('@')[1] == 'latest'"
	// +optional
	Alias string `json:"alias,omitempty"`
	// Tags select images having all of these tags; "*" matches any value.
	// +optional
	Tags SelectorTags `json:"tags,omitempty"`
	// ID is an image id.
	// +kubebuilder:validation:Pattern=`^ami-[0-9a-z]+$`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	ID string `json:"id,omitempty"`
	// Name is an image name; wildcards are allowed.
	// +kubebuilder:validation:MaxLength=128
	// +optional
	Name string `json:"name,omitempty"`
	// Owner is the account id or alias (self, amazon) owning the image.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Owner string `json:"owner,omitempty"`
	// SSMParameter is the name of an SSM parameter holding an image id.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	SSMParameter string `json:"ssmParameter,omitempty"`
}

// SelectorTags are tags a selected resource must carry; "*" as a value matches any value.
//
// +kubebuilder:validation:MinProperties=1
// +kubebuilder:validation:MaxProperties=20
// +kubebuilder:validation:XValidation:message="empty tag keys or values aren't supported",rule="self.all(k, size(k) > 0 && size(self[k]) > 0)"
type SelectorTags map[string]string

// MetadataOptions are the settings of the instance metadata service.
type MetadataOptions struct {
	// HTTPEndpoint turns the metadata service on or off.
	// +kubebuilder:default=enabled
	// +kubebuilder:validation:Enum=enabled;disabled
	// +optional
	HTTPEndpoint *string `json:"httpEndpoint,omitempty"`
	// HTTPProtocolIPv6 turns the IPv6 endpoint of the metadata service on or off.
	// +kubebuilder:default=disabled
	// +kubebuilder:validation:Enum=enabled;disabled
	// +optional
	HTTPProtocolIPv6 *string `json:"httpProtocolIPv6,omitempty"`
	// HTTPPutResponseHopLimit is the hop limit of metadata PUT responses; 1 keeps pods on the
	// pod network from reaching the node's credentials.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	// +optional
	HTTPPutResponseHopLimit *int64 `json:"httpPutResponseHopLimit,omitempty"`
	// HTTPTokens says whether session tokens (IMDSv2) are required.
	// +kubebuilder:default=required
	// +kubebuilder:validation:Enum=required;optional
	// +optional
	HTTPTokens *string `json:"httpTokens,omitempty"`
}

// BlockDeviceMapping is one volume of a machine.
type BlockDeviceMapping struct {
	// DeviceName is the device name (/dev/xvda).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	DeviceName *string `json:"deviceName,omitempty"`
	// EBS is the EBS volume.
	// +optional
	EBS *BlockDevice `json:"ebs,omitempty"`
	// RootVolume marks the volume that holds the root filesystem.
	// +optional
	RootVolume bool `json:"rootVolume,omitempty"`
}

// BlockDevice is an EBS volume.
//
// +kubebuilder:validation:XValidation:message="snapshotID or volumeSize must be defined",rule="has(self.snapshotID) || has(self.volumeSize)"
type BlockDevice struct {
	// DeleteOnTermination deletes the volume with the machine.
	// +optional
	DeleteOnTermination *bool `json:"deleteOnTermination,omitempty"`
	// Encrypted encrypts the volume.
	// +optional
	Encrypted *bool `json:"encrypted,omitempty"`
	// IOPS is the provisioned I/O operations per second (io1, io2, gp3).
	// +kubebuilder:validation:Minimum=0
	// +optional
	IOPS *int64 `json:"iops,omitempty"`
	// KMSKeyID is the KMS key that encrypts the volume.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	KMSKeyID *string `json:"kmsKeyID,omitempty"`
	// SnapshotID is the snapshot the volume is made from.
	// +kubebuilder:validation:Pattern=`^snap-[0-9a-z]+$`
	// +kubebuilder:validation:MaxLength=64
	// +optional
	SnapshotID *string `json:"snapshotID,omitempty"`
	// Throughput is the provisioned throughput in MiB/s (gp3).
	// +kubebuilder:validation:Minimum=125
	// +kubebuilder:validation:Maximum=2000
	// +optional
	Throughput *int64 `json:"throughput,omitempty"`
	// VolumeInitializationRate is the rate, in MiB/s, at which a volume made from a snapshot is
	// initialized (100 to 300).
	// +kubebuilder:validation:Minimum=100
	// +kubebuilder:validation:Maximum=300
	// +optional
	VolumeInitializationRate *int32 `json:"volumeInitializationRate,omitempty"`
	// VolumeSize is the size of the volume, 1Gi to 64Ti, in G, Gi, T or Ti.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([1-9][0-9]{0,4}Gi?|[1-9][0-9]?Ti?)$`
	// +optional
	VolumeSize *resource.Quantity `json:"volumeSize,omitempty"`
	// VolumeType is the EBS volume type.
	// +kubebuilder:validation:Enum=standard;io1;io2;gp2;sc1;st1;gp3
	// +optional
	VolumeType *string `json:"volumeType,omitempty"`
}

// InstanceStorePolicy says how local instance stores are used.
type InstanceStorePolicy string

// InstanceStorePolicyRAID0 joins the local NVMe disks into one RAID-0 array used for the kubelet
// and container storage.
const InstanceStorePolicyRAID0 InstanceStorePolicy = "RAID0"

// KubeletConfiguration overrides kubelet settings of a machine; Capstan also uses them to compute
// a machine's allocatable resources before it is launched. Other fields of the kubelet's own
// configuration are kept as written, so manifests that set them apply unchanged.
//
// +kubebuilder:pruning:PreserveUnknownFields
// +kubebuilder:validation:XValidation:message="imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",rule="has(self.imageGCHighThresholdPercent) && has(self.imageGCLowThresholdPercent) ?  self.imageGCHighThresholdPercent > self.imageGCLowThresholdPercent  : true"
// +kubebuilder:validation:XValidation:message="each evictionSoft key needs an evictionSoftGracePeriod of the same key",rule="!has(self.evictionSoft) || (has(self.evictionSoftGracePeriod) && self.evictionSoft.all(e, e in self.evictionSoftGracePeriod))"
// +kubebuilder:validation:XValidation:message="each evictionSoftGracePeriod key needs an evictionSoft of the same key",rule="!has(self.evictionSoftGracePeriod) || (has(self.evictionSoft) && self.evictionSoftGracePeriod.all(e, e in self.evictionSoft))"
type KubeletConfiguration struct {
	// ClusterDNS are the cluster DNS server addresses.
	// +kubebuilder:validation:MaxItems=10
	// +kubebuilder:validation:items:MaxLength=64
	// +optional
	ClusterDNS []string `json:"clusterDNS,omitempty"`
	// MaxPods is the most pods the kubelet runs.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxPods *int32 `json:"maxPods,omitempty"`
	// PodsPerCore caps pods per CPU core; the lower of this and MaxPods applies.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PodsPerCore *int32 `json:"podsPerCore,omitempty"`
	// SystemReserved is reserved for system daemons.
	// +kubebuilder:validation:XValidation:message="valid keys for systemReserved are ['cpu','memory','ephemeral-storage','pid']",rule="self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')"
	// +kubebuilder:validation:MaxProperties=4
	// +optional
	SystemReserved ReservedResources `json:"systemReserved,omitempty"`
	// KubeReserved is reserved for Kubernetes daemons.
	// +kubebuilder:validation:XValidation:message="valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']",rule="self.all(x, x=='cpu' || x=='memory' || x=='ephemeral-storage' || x=='pid')"
	// +kubebuilder:validation:MaxProperties=4
	// +optional
	KubeReserved ReservedResources `json:"kubeReserved,omitempty"`
	// EvictionHard are the hard eviction thresholds.
	// +kubebuilder:validation:XValidation:message="valid keys for evictionHard are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",rule="self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])"
	// +optional
	EvictionHard EvictionThresholds `json:"evictionHard,omitempty"`
	// EvictionSoft are the soft eviction thresholds.
	// +kubebuilder:validation:XValidation:message="valid keys for evictionSoft are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",rule="self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])"
	// +optional
	EvictionSoft EvictionThresholds `json:"evictionSoft,omitempty"`
	// EvictionSoftGracePeriod are the grace periods of the soft eviction thresholds.
	// +kubebuilder:validation:XValidation:message="valid keys for evictionSoftGracePeriod are ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available']",rule="self.all(x, x in ['memory.available','nodefs.available','nodefs.inodesFree','imagefs.available','imagefs.inodesFree','pid.available'])"
	// +kubebuilder:validation:XValidation:message="evictionSoftGracePeriod values must be durations of at most 2562047h (about 292 years, the longest Go reads)",rule="self.all(x, duration(self[x]) <= duration('2562047h'))"
	// +kubebuilder:validation:MaxProperties=6
	// +optional
	EvictionSoftGracePeriod map[string]metav1.Duration `json:"evictionSoftGracePeriod,omitempty"`
	// EvictionMaxPodGracePeriod is the longest grace period given to pods evicted under a soft
	// threshold, in seconds.
	// +optional
	EvictionMaxPodGracePeriod *int32 `json:"evictionMaxPodGracePeriod,omitempty"`
	// ImageGCHighThresholdPercent is the disk usage at which image garbage collection always runs.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	ImageGCHighThresholdPercent *int32 `json:"imageGCHighThresholdPercent,omitempty"`
	// ImageGCLowThresholdPercent is the disk usage image garbage collection brings usage down to.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	ImageGCLowThresholdPercent *int32 `json:"imageGCLowThresholdPercent,omitempty"`
	// CPUCFSQuota enforces CPU limits with CFS quota.
	// +optional
	CPUCFSQuota *bool `json:"cpuCFSQuota,omitempty"`
	// Extra are the other fields of the kubelet's configuration (KubeletConfiguration of
	// kubelet.config.k8s.io/v1beta1), as written; they are read and written with the typed ones
	// at the same level.
	Extra map[string]runtime.RawExtension `json:"-"`
}

// ReservedResources are resources set aside on a node, as quantities by resource name.
type ReservedResources map[string]ReservedQuantity

// ReservedQuantity is a non-negative resource quantity ("100m", "1Gi", "512").
//
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$`
type ReservedQuantity string

// EvictionThresholds are eviction signals mapped to a threshold.
//
// +kubebuilder:validation:MaxProperties=6
type EvictionThresholds map[string]EvictionThreshold

// EvictionThreshold is a quantity ("500Mi") or a percentage ("10%").
//
// +kubebuilder:validation:MaxLength=64
// +kubebuilder:validation:Pattern=`^((100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)%|[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?)$`
type EvictionThreshold string

// EC2NodeClassStatus is what Capstan resolved of an EC2NodeClass.
type EC2NodeClassStatus struct {
	// Subnets are the subnets the selector terms resolved to.
	// +optional
	Subnets []Subnet `json:"subnets,omitempty"`
	// SecurityGroups are the security groups the selector terms resolved to.
	// +optional
	SecurityGroups []SecurityGroup `json:"securityGroups,omitempty"`
	// AMIs are the images the selector terms resolved to, with the requirements each suits.
	// +optional
	AMIs []AMI `json:"amis,omitempty"`
	// InstanceProfile is the instance profile in use.
	// +optional
	InstanceProfile string `json:"instanceProfile,omitempty"`
	// CapacityReservations are the capacity reservations the selector terms resolved to.
	// +optional
	CapacityReservations []CapacityReservation `json:"capacityReservations,omitempty"`
	// Conditions are the EC2NodeClass's conditions (Ready and one per resolved field).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Subnet is a resolved subnet.
type Subnet struct {
	// ID is the subnet id.
	ID string `json:"id"`
	// Zone is the availability zone of the subnet.
	Zone string `json:"zone"`
	// ZoneID is the availability zone id of the subnet.
	// +optional
	ZoneID string `json:"zoneID,omitempty"`
}

// SecurityGroup is a resolved security group.
type SecurityGroup struct {
	// ID is the security group id.
	ID string `json:"id"`
	// Name is the security group name.
	// +optional
	Name string `json:"name,omitempty"`
}

// AMI is a resolved image.
type AMI struct {
	// ID is the image id.
	ID string `json:"id"`
	// Name is the image name.
	// +optional
	Name string `json:"name,omitempty"`
	// Requirements are the node requirements (architecture, accelerators) the image suits.
	Requirements []AMIRequirement `json:"requirements"`
	// Deprecated marks an image AWS has deprecated.
	// +optional
	Deprecated bool `json:"deprecated,omitempty"`
}

// AMIRequirement is a node-selector requirement an image suits.
type AMIRequirement struct {
	// Key is the label key.
	Key string `json:"key"`
	// Operator is In, NotIn, Exists or DoesNotExist.
	Operator string `json:"operator"`
	// Values are the label values.
	// +optional
	Values []string `json:"values,omitempty"`
}

// EC2NodeClass condition types.
const (
	ConditionTypeSubnetsReady         = "SubnetsReady"
	ConditionTypeSecurityGroupsReady  = "SecurityGroupsReady"
	ConditionTypeAMIsReady            = "AMIsReady"
	ConditionTypeInstanceProfileReady = "InstanceProfileReady"
	// ConditionTypeCapacityReservationsReady is true when capacityReservationSelectorTerms
	// resolved (to any number of active reservations).
	ConditionTypeCapacityReservationsReady = "CapacityReservationsReady"
	ConditionTypeValidationSucceeded       = "ValidationSucceeded"
	ConditionTypeReady                     = "Ready"
)

// EC2NodeClass is how a NodePool's machines are launched on AWS.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=ec2nodeclasses,scope=Cluster,categories=karpenter,shortName={ec2nc,ec2ncs}
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Role",type="string",JSONPath=".spec.role",priority=1
type EC2NodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is how machines are launched.
	// +required
	Spec EC2NodeClassSpec `json:"spec"`
	// Status is what was resolved.
	// +optional
	Status EC2NodeClassStatus `json:"status,omitzero"`
}

// EC2NodeClassList is a list of EC2NodeClasses.
//
// +kubebuilder:object:root=true
type EC2NodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EC2NodeClass `json:"items"`
}
