package v1

import corev1 "k8s.io/api/core/v1"

// Well-known labels that Capstan sets on NodeClaims and Nodes, or that requirements may name.
const (
	// NodePoolLabelKey names the NodePool a NodeClaim or Node belongs to.
	NodePoolLabelKey = Group + "/nodepool"
	// CapacityTypeLabelKey is the purchase option of a machine: on-demand, spot or reserved.
	CapacityTypeLabelKey = Group + "/capacity-type"
	// NodeInitializedLabelKey is set on a Node once its NodeClaim is Initialized.
	NodeInitializedLabelKey = Group + "/initialized"
	// NodeRegisteredLabelKey is set on a Node once its NodeClaim is Registered.
	NodeRegisteredLabelKey = Group + "/registered"
	// NodeDoNotSyncTaintsLabelKey on a Node stops Capstan from syncing the NodeClaim's taints.
	NodeDoNotSyncTaintsLabelKey = Group + "/do-not-sync-taints"

	// ArchLabelKey and the labels below are Kubernetes' well-known node labels.
	ArchLabelKey = corev1.LabelArchStable
	// OSLabelKey is the node's operating system.
	OSLabelKey = corev1.LabelOSStable
	// ZoneLabelKey is the node's topology zone.
	ZoneLabelKey = corev1.LabelTopologyZone
	// RegionLabelKey is the node's topology region.
	RegionLabelKey = corev1.LabelTopologyRegion
	// InstanceTypeLabelKey is the node's instance type.
	InstanceTypeLabelKey = corev1.LabelInstanceTypeStable
	// HostnameLabelKey is the node's hostname; it cannot be required of a NodePool.
	HostnameLabelKey = corev1.LabelHostname
	// WindowsBuildLabelKey is the node's Windows build.
	WindowsBuildLabelKey = corev1.LabelWindowsBuild
)

// Capacity types.
const (
	CapacityTypeOnDemand = "on-demand"
	CapacityTypeSpot     = "spot"
	CapacityTypeReserved = "reserved"
)

// Architectures and operating systems.
const (
	ArchitectureAmd64 = "amd64"
	ArchitectureArm64 = "arm64"
	OSLinux           = "linux"
	OSWindows         = "windows"
)

// Well-known annotations.
const (
	// DoNotDisruptAnnotationKey on a pod or a Node blocks voluntary disruption of the node.
	DoNotDisruptAnnotationKey = Group + "/do-not-disrupt"
	// DoNotRepairAnnotationKey "true" on a Node keeps node repair from replacing it.
	DoNotRepairAnnotationKey = Group + "/do-not-repair"
	// NodePoolHashAnnotationKey is the hash of a NodePool's template, for drift detection.
	NodePoolHashAnnotationKey = Group + "/nodepool-hash"
	// NodePoolHashVersionAnnotationKey is the version of the hashing scheme, so that a change
	// of scheme does not read as drift.
	NodePoolHashVersionAnnotationKey = Group + "/nodepool-hash-version"
	// NodeClaimTerminationTimestampAnnotationKey is the time by which a NodeClaim's node is
	// deleted whatever its pods' disruption rules (creation of deletion + terminationGracePeriod).
	NodeClaimTerminationTimestampAnnotationKey = Group + "/nodeclaim-termination-timestamp"
	// NodeClaimMinValuesRelaxedAnnotationKey records that minValues were relaxed for a NodeClaim.
	NodeClaimMinValuesRelaxedAnnotationKey = Group + "/nodeclaim-min-values-relaxed"
)

// Finalizers.
const (
	// TerminationFinalizer holds a NodeClaim or Node until its machine is drained and deleted.
	TerminationFinalizer = Group + "/termination"
)

// Taints.
const (
	// UnregisteredTaintKey is on a Node until its NodeClaim has registered it.
	UnregisteredTaintKey = Group + "/unregistered"
	// DisruptedTaintKey is put on a Node that is being disrupted, so nothing new lands there.
	DisruptedTaintKey = Group + "/disrupted"
)

// UnregisteredNoExecuteTaint is the taint a machine registers with until Capstan adopts it.
var UnregisteredNoExecuteTaint = corev1.Taint{Key: UnregisteredTaintKey, Effect: corev1.TaintEffectNoExecute}

// DisruptedNoScheduleTaint keeps new pods off a Node that is being disrupted.
var DisruptedNoScheduleTaint = corev1.Taint{Key: DisruptedTaintKey, Effect: corev1.TaintEffectNoSchedule}

// RestrictedLabelDomains may not be set in NodePool labels or requirements, except for the
// keys in WellKnownLabels and the subdomains of LabelDomainExceptions.
var RestrictedLabelDomains = []string{"kubernetes.io", "k8s.io", Group}

// LabelDomainExceptions are subdomains of RestrictedLabelDomains that users may set.
var LabelDomainExceptions = []string{"kops.k8s.io", "node.kubernetes.io", "node-restriction.kubernetes.io"}

// WellKnownLabels are the label keys a provider resolves and requirements may constrain.
var WellKnownLabels = []string{
	NodePoolLabelKey, CapacityTypeLabelKey,
	ZoneLabelKey, RegionLabelKey, InstanceTypeLabelKey, ArchLabelKey, OSLabelKey, WindowsBuildLabelKey,
}

// NormalizedLabels maps deprecated node label keys to the stable keys they mean: a pod that
// selects or spreads on the deprecated key is read as naming the stable one.
var NormalizedLabels = map[string]string{
	corev1.LabelFailureDomainBetaZone:   ZoneLabelKey,
	corev1.LabelFailureDomainBetaRegion: RegionLabelKey,
	corev1.LabelInstanceType:            InstanceTypeLabelKey,
	"beta.kubernetes.io/arch":           ArchLabelKey,
	"beta.kubernetes.io/os":             OSLabelKey,
}

// ResourceNodes is the pseudo-resource of a NodePool's limits that counts machines.
const ResourceNodes corev1.ResourceName = "nodes"
