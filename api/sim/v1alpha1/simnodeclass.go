package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Catalog names a built-in set of instance types.
//
// +kubebuilder:validation:Enum=Default;Full
type Catalog string

// Catalogs.
const (
	// CatalogDefault is a few hundred current-generation EC2 types (c, m, r, t families and a few
	// GPU types), enough for realistic plans while keeping the solver's input small.
	CatalogDefault Catalog = "Default"
	// CatalogFull is every instance type of the embedded EC2 catalog.
	CatalogFull Catalog = "Full"
)

// SimNodeClassSpec is the simulated cloud a NodePool's machines are launched in.
type SimNodeClassSpec struct {
	// Zones are the zones the simulated region offers.
	// +kubebuilder:default:={"zone-a","zone-b","zone-c"}
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self.all(z, self.exists_one(y, y == z))",message="zones must be unique"
	// +optional
	Zones []string `json:"zones,omitempty"`
	// Catalog is the built-in set of instance types offered.
	// +kubebuilder:default=Default
	// +optional
	Catalog Catalog `json:"catalog,omitempty"`
	// InstanceTypesFrom, when set, replaces the catalog with the instance types held in a
	// ConfigMap as a JSON list in the format of Karpenter's kwok provider (instance_types.json),
	// with that provider's overhead model (100m CPU and 10Mi memory reserved) and the offerings'
	// own prices and zones: the same menu can run under Capstan and under the kwok provider.
	// InstanceTypes still narrows the list and PriceOverrides still apply; Catalog, Zones and
	// SpotPrice do not.
	// +optional
	InstanceTypesFrom *InstanceTypesSource `json:"instanceTypesFrom,omitempty"`
	// InstanceTypes, when set, offers only these types of the catalog.
	// +kubebuilder:validation:MaxItems=2000
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9][-a-z0-9.]*$`
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`
	// SpotPrice sets the spot price as a fraction of on-demand; each type and zone gets a stable
	// fraction within the range.
	// +kubebuilder:default:={minPercent: 30, maxPercent: 45}
	// +optional
	SpotPrice SpotPriceRange `json:"spotPrice,omitzero"`
	// PriceOverrides replace catalog prices of some offerings.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	PriceOverrides []PriceOverride `json:"priceOverrides,omitempty"`
	// Kubelet holds the kubelet settings that change a machine's pod capacity, as in an
	// EC2NodeClass.
	// +optional
	Kubelet *KubeletConfiguration `json:"kubelet,omitempty"`
	// LaunchDelay is how long a launch takes before the instance exists.
	// +kubebuilder:default:="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2562047h')",message="must be a duration of at most 2562047h (about 292 years, the longest Go reads)"
	// +optional
	LaunchDelay *metav1.Duration `json:"launchDelay,omitempty"`
	// RegistrationDelay is how long a launched instance takes to create its Node.
	// +kubebuilder:default:="2s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('2562047h')",message="must be a duration of at most 2562047h (about 292 years, the longest Go reads)"
	// +optional
	RegistrationDelay *metav1.Duration `json:"registrationDelay,omitempty"`
	// Failures injects faults into launches.
	// +optional
	Failures Failures `json:"failures,omitzero"`
	// CapacityReservations are capacity reservations the simulated account holds: machines of
	// one instance type in one zone, paid for whether they run or not. Each is offered as
	// capacity type reserved at a near-zero price (an EC2NodeClass's resolved reservations are
	// offered the same way), and the simulated cloud launches no more machines into one than
	// its count. After its endTime a default reservation takes no launches and its machines run
	// on as on-demand; a capacity block takes none from 40 minutes before its end, when its
	// machines are drained.
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="self.all(r, self.exists_one(o, o.id == r.id))",message="capacity reservation ids must be unique"
	// +optional
	CapacityReservations []SimCapacityReservation `json:"capacityReservations,omitempty"`
}

// SimCapacityReservation is a capacity reservation of the simulated account.
type SimCapacityReservation struct {
	// ID is the reservation's id, as EC2 writes them (cr-…).
	// +kubebuilder:validation:Pattern=`^cr-[0-9a-z]+$`
	// +kubebuilder:validation:MaxLength=64
	// +required
	ID string `json:"id"`
	// InstanceType is the reserved instance type; a type the class does not offer reserves
	// nothing.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +required
	InstanceType string `json:"instanceType"`
	// Zone is the reservation's zone; a zone the class does not offer reserves nothing.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Zone string `json:"zone"`
	// Count is how many machines the reservation holds.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +required
	Count int32 `json:"count"`
	// ReservationType is default (an on-demand capacity reservation) or capacity-block.
	// +kubebuilder:validation:Enum=default;capacity-block
	// +kubebuilder:default=default
	// +optional
	ReservationType string `json:"reservationType,omitempty"`
	// EndTime is when the reservation ends, if it does.
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
}

// InstanceTypesSource is where a SimNodeClass reads its instance types.
type InstanceTypesSource struct {
	// ConfigMap names the ConfigMap and the key holding the list.
	// +required
	ConfigMap ConfigMapKeyReference `json:"configMap"`
}

// ConfigMapKeyReference names a key of a ConfigMap.
type ConfigMapKeyReference struct {
	// Namespace is the ConfigMap's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +required
	Namespace string `json:"namespace"`
	// Name is the ConfigMap's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Key is the data key holding the JSON list.
	// +kubebuilder:default="instance_types.json"
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// SpotPriceRange is a range of spot prices as percentages of on-demand.
//
// +kubebuilder:validation:XValidation:rule="self.minPercent <= self.maxPercent",message="minPercent must not exceed maxPercent"
type SpotPriceRange struct {
	// MinPercent is the lowest spot price, in percent of on-demand.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	MinPercent int32 `json:"minPercent"`
	// MaxPercent is the highest spot price, in percent of on-demand.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +required
	MaxPercent int32 `json:"maxPercent"`
}

// OfferingSelector matches offerings; an empty field matches every value.
type OfferingSelector struct {
	// InstanceType is the instance type name.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	InstanceType string `json:"instanceType,omitempty"`
	// Zone is the zone.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Zone string `json:"zone,omitempty"`
	// CapacityType is on-demand, spot or reserved.
	// +kubebuilder:validation:Enum=on-demand;spot;reserved
	// +optional
	CapacityType string `json:"capacityType,omitempty"`
}

// PriceOverride sets the hourly price of the offerings it selects.
type PriceOverride struct {
	OfferingSelector `json:",inline"`
	// Price is the price in US dollars per hour, as a decimal ("0.0416").
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	// +kubebuilder:validation:MaxLength=20
	// +required
	Price string `json:"price"`
}

// Failures are faults the simulated cloud injects.
type Failures struct {
	// InsufficientCapacity makes launches of the selected offerings fail with an
	// insufficient-capacity error.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	InsufficientCapacity []OfferingSelector `json:"insufficientCapacity,omitempty"`
	// LaunchErrors makes launches of the selected offerings fail with a generic error.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	LaunchErrors []OfferingSelector `json:"launchErrors,omitempty"`
	// Shortages bound how many machines of each selected offering may run at once, across every
	// SimNodeClass (a zone's capacity of a type is the account's, not a class's): a launch beyond
	// that answers insufficient capacity, as EC2 does when a pool runs dry.
	// +kubebuilder:validation:MaxItems=1000
	// +optional
	Shortages []OfferingShortage `json:"shortages,omitempty"`
	// NeverRegister launches the selected offerings but never creates their Nodes.
	// +kubebuilder:validation:MaxItems=100
	// +optional
	NeverRegister []OfferingSelector `json:"neverRegister,omitempty"`
}

// OfferingShortage is a finite capacity of the offerings it selects.
type OfferingShortage struct {
	OfferingSelector `json:",inline"`
	// Machines is how many machines of each selected offering may run at once; 0 is none.
	// +kubebuilder:validation:Minimum=0
	// +required
	Machines int32 `json:"machines"`
}

// SimNodeClassStatus is what the simulated cloud resolved of a SimNodeClass.
type SimNodeClassStatus struct {
	// InstanceTypes is the number of instance types offered.
	// +optional
	InstanceTypes int32 `json:"instanceTypes,omitempty"`
	// Conditions hold Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionTypeReady is true when the class resolves to at least one instance type.
const ConditionTypeReady = "Ready"

// SimNodeClass is the simulated cloud's NodeClass. A NodePool names it in nodeClassRef
// ({group: capstan.dev, kind: SimNodeClass, name: …}).
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=simnodeclasses,scope=Cluster,categories=capstan,shortName=snc
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status"
// +kubebuilder:printcolumn:name="Types",type="integer",JSONPath=".status.instanceTypes"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
type SimNodeClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the simulated cloud's settings.
	// +kubebuilder:default:={}
	// +optional
	Spec SimNodeClassSpec `json:"spec,omitzero"`
	// Status is what was resolved.
	// +optional
	Status SimNodeClassStatus `json:"status,omitzero"`
}

// SimNodeClassList is a list of SimNodeClasses.
//
// +kubebuilder:object:root=true
type SimNodeClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SimNodeClass `json:"items"`
}

// KubeletConfiguration are the kubelet settings the simulated cloud applies to its machines.
type KubeletConfiguration struct {
	// MaxPods is the most pods a machine runs, replacing the type's default.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxPods *int32 `json:"maxPods,omitempty"`
	// PodsPerCore caps pods per vCPU; the lower of this and MaxPods (or the default) applies.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PodsPerCore *int32 `json:"podsPerCore,omitempty"`
}
