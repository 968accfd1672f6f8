package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// CapacityReservationSelectorTerm selects capacity reservations by id, or by tags, owner and
// match criteria.
//
// +kubebuilder:validation:XValidation:message="expected at least one, got none, ['tags', 'id', 'instanceMatchCriteria']",rule="has(self.tags) || has(self.id) || has(self.instanceMatchCriteria)"
// +kubebuilder:validation:XValidation:message="'id' is mutually exclusive, cannot be set along with other fields in a capacity reservation selector term",rule="!has(self.id) || !(has(self.tags) || has(self.ownerID) || has(self.instanceMatchCriteria))"
type CapacityReservationSelectorTerm struct {
	// Tags select reservations having all of these tags; "*" matches any value.
	// +kubebuilder:validation:MaxProperties=20
	// +kubebuilder:validation:XValidation:message="empty tag keys or values aren't supported",rule="self.all(k, k != '' && self[k] != '')"
	// +optional
	Tags map[string]string `json:"tags,omitempty"`
	// ID is a capacity reservation id.
	// +kubebuilder:validation:Pattern=`^cr-[0-9a-z]+$`
	// +optional
	ID string `json:"id,omitempty"`
	// OwnerID is the account that owns the reservation.
	// +kubebuilder:validation:Pattern=`^[0-9]{12}$`
	// +optional
	OwnerID string `json:"ownerID,omitempty"`
	// InstanceMatchCriteria selects open or targeted reservations.
	// +kubebuilder:validation:Enum=open;targeted
	// +optional
	InstanceMatchCriteria string `json:"instanceMatchCriteria,omitempty"`
}

// PlacementGroupSelector names one placement group, by name or by id.
//
// +kubebuilder:validation:XValidation:message="expected at least one, got none, ['name', 'id']",rule="has(self.name) || has(self.id)"
// +kubebuilder:validation:XValidation:message="'name' and 'id' are mutually exclusive",rule="!(has(self.name) && has(self.id))"
type PlacementGroupSelector struct {
	// Name is the placement group's name.
	// +kubebuilder:validation:MinLength=1
	// +optional
	Name *string `json:"name,omitempty"`
	// ID is the placement group's id.
	// +kubebuilder:validation:Pattern=`^pg-[0-9a-z]+$`
	// +optional
	ID *string `json:"id,omitempty"`
}

// NetworkInterface is one network interface attached to a machine at launch.
type NetworkInterface struct {
	// NetworkCardIndex is the network card the interface is attached to.
	// +kubebuilder:validation:Minimum=0
	// +required
	NetworkCardIndex int32 `json:"networkCardIndex"`
	// DeviceIndex is the interface's device index on its card.
	// +kubebuilder:validation:Minimum=0
	// +required
	DeviceIndex int32 `json:"deviceIndex"`
	// InterfaceType is "interface" (ENA) or "efa-only".
	// +kubebuilder:validation:Enum=interface;efa-only
	// +required
	InterfaceType string `json:"interfaceType"`
}

// EnclaveOptions turns AWS Nitro Enclaves on or off.
type EnclaveOptions struct {
	// Enabled turns Nitro Enclaves on.
	// +required
	Enabled bool `json:"enabled"`
}

// ConnectionTracking holds idle connection-tracking timeouts, in seconds; EC2's defaults apply to
// those left unset.
//
// +kubebuilder:validation:XValidation:message="at least one of tcpEstablishedTimeout, udpStreamTimeout, or udpTimeout must be set",rule="has(self.tcpEstablishedTimeout) || has(self.udpStreamTimeout) || has(self.udpTimeout)"
type ConnectionTracking struct {
	// TCPEstablishedTimeout is the timeout of idle established TCP connections (60 to 432000).
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=432000
	// +optional
	TCPEstablishedTimeout *int32 `json:"tcpEstablishedTimeout,omitempty"`
	// UDPStreamTimeout is the timeout of idle UDP flows that saw more than one exchange (60 to 180).
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=180
	// +optional
	UDPStreamTimeout *int32 `json:"udpStreamTimeout,omitempty"`
	// UDPTimeout is the timeout of idle UDP flows that saw traffic one way or one exchange (30 to
	// 60).
	// +kubebuilder:validation:Minimum=30
	// +kubebuilder:validation:Maximum=60
	// +optional
	UDPTimeout *int32 `json:"udpTimeout,omitempty"`
}

// CPUOptions are processor settings of a machine.
type CPUOptions struct {
	// NestedVirtualization enables or disables nested virtualization; when enabled, only instance
	// types that support it are candidates.
	// +kubebuilder:validation:Enum=enabled;disabled
	// +optional
	NestedVirtualization *string `json:"nestedVirtualization,omitempty"`
}

// CapacityReservation is a resolved capacity reservation.
type CapacityReservation struct {
	// ID is the reservation id.
	// +kubebuilder:validation:Pattern=`^cr-[0-9a-z]+$`
	ID string `json:"id"`
	// AvailabilityZone is the zone the reservation is in.
	AvailabilityZone string `json:"availabilityZone"`
	// InstanceType is the reserved instance type.
	InstanceType string `json:"instanceType"`
	// OwnerID is the account that owns the reservation.
	// +kubebuilder:validation:Pattern=`^[0-9]{12}$`
	OwnerID string `json:"ownerID"`
	// InstanceMatchCriteria is open or targeted.
	// +kubebuilder:validation:Enum=open;targeted
	InstanceMatchCriteria string `json:"instanceMatchCriteria"`
	// ReservationType is default or capacity-block.
	// +kubebuilder:validation:Enum=default;capacity-block
	// +kubebuilder:default=default
	// +optional
	ReservationType string `json:"reservationType,omitempty"`
	// State is active or expiring.
	// +kubebuilder:validation:Enum=active;expiring
	// +kubebuilder:default=active
	// +optional
	State string `json:"state,omitempty"`
	// EndTime is when the reservation ends, if it does.
	// +optional
	EndTime *metav1.Time `json:"endTime,omitempty"`
	// Interruptible says the reservation may be reclaimed.
	// +optional
	Interruptible bool `json:"interruptible,omitempty"`
}
