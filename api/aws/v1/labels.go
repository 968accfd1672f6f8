package v1

// Labels that describe an EC2 instance type; NodePool requirements may constrain them.
const (
	LabelInstanceCategory                     = Group + "/instance-category"
	LabelInstanceFamily                       = Group + "/instance-family"
	LabelInstanceGeneration                   = Group + "/instance-generation"
	LabelInstanceSize                         = Group + "/instance-size"
	LabelInstanceCPU                          = Group + "/instance-cpu"
	LabelInstanceCPUManufacturer              = Group + "/instance-cpu-manufacturer"
	LabelInstanceCPUSustainedClockSpeedMhz    = Group + "/instance-cpu-sustained-clock-speed-mhz"
	LabelInstanceMemory                       = Group + "/instance-memory"
	LabelInstanceEBSBandwidth                 = Group + "/instance-ebs-bandwidth"
	LabelInstanceNetworkBandwidth             = Group + "/instance-network-bandwidth"
	LabelInstanceHypervisor                   = Group + "/instance-hypervisor"
	LabelInstanceEncryptionInTransitSupported = Group + "/instance-encryption-in-transit-supported"
	LabelInstanceCapabilityFlex               = Group + "/instance-capability-flex"
	LabelInstanceLocalNVME                    = Group + "/instance-local-nvme"
	LabelInstanceGPUName                      = Group + "/instance-gpu-name"
	LabelInstanceGPUManufacturer              = Group + "/instance-gpu-manufacturer"
	LabelInstanceGPUCount                     = Group + "/instance-gpu-count"
	LabelInstanceGPUMemory                    = Group + "/instance-gpu-memory"
	LabelInstanceAcceleratorName              = Group + "/instance-accelerator-name"
	LabelInstanceAcceleratorManufacturer      = Group + "/instance-accelerator-manufacturer"
	LabelInstanceAcceleratorCount             = Group + "/instance-accelerator-count"
)

// Labels of a machine launched into a capacity reservation (capacity type reserved).
const (
	// LabelCapacityReservationID is the reservation's id (cr-…).
	LabelCapacityReservationID = Group + "/capacity-reservation-id"
	// LabelCapacityReservationType is default (an on-demand capacity reservation) or
	// capacity-block.
	LabelCapacityReservationType = Group + "/capacity-reservation-type"
	// LabelCapacityReservationInterruptible is "true" on a machine of an interruptible
	// reservation (its owner may reclaim it; the interruption queue says when), "false" on the
	// other reserved machines.
	LabelCapacityReservationInterruptible = Group + "/capacity-reservation-interruptible"
	// CapacityReservationTypeDefault and CapacityReservationTypeCapacityBlock are its values.
	CapacityReservationTypeDefault       = "default"
	CapacityReservationTypeCapacityBlock = "capacity-block"
)

// WellKnownLabels are the instance-type labels the AWS provider (and the simulated cloud, whose
// catalog is EC2's) resolves on its machines. A type without one of them does not carry that
// label: GPU labels, for instance, exist only on GPU types.
var WellKnownLabels = []string{
	LabelInstanceCategory, LabelInstanceFamily, LabelInstanceGeneration, LabelInstanceSize, LabelInstanceCPU,
	LabelInstanceCPUManufacturer, LabelInstanceCPUSustainedClockSpeedMhz, LabelInstanceMemory, LabelInstanceEBSBandwidth,
	LabelInstanceNetworkBandwidth, LabelInstanceHypervisor, LabelInstanceEncryptionInTransitSupported,
	LabelInstanceCapabilityFlex, LabelInstanceLocalNVME, LabelInstanceGPUName, LabelInstanceGPUManufacturer,
	LabelInstanceGPUCount, LabelInstanceGPUMemory, LabelInstanceAcceleratorName, LabelInstanceAcceleratorManufacturer,
	LabelInstanceAcceleratorCount, LabelCapacityReservationID, LabelCapacityReservationType,
	LabelCapacityReservationInterruptible,
}

// Annotations and tags Capstan sets on AWS resources.
const (
	// AnnotationEC2NodeClassHash is the hash of an EC2NodeClass's spec, for drift detection.
	AnnotationEC2NodeClassHash = Group + "/ec2nodeclass-hash"
	// AnnotationEC2NodeClassHashVersion is the version of that hashing scheme.
	AnnotationEC2NodeClassHashVersion = Group + "/ec2nodeclass-hash-version"
	// TagNodeClaim names the NodeClaim an instance was launched for.
	TagNodeClaim = "karpenter.sh/nodeclaim"
	// TagEC2NodeClass names the EC2NodeClass an instance was launched from.
	TagEC2NodeClass = Group + "/ec2nodeclass"
)
