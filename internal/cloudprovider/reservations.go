package cloudprovider

import (
	"context"
	"slices"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// PinnedReservation is the capacity reservation a NodeClaim holds: the one its machine launched
// into (its label), or, before the launch, the one its requirements pin it to (a single value
// of ReservationIDLabelKey). "" when it holds none.
func PinnedReservation(nc *karpv1.NodeClaim) string {
	if id := nc.Labels[ReservationIDLabelKey]; id != "" {
		return id
	}
	for _, r := range nc.Spec.Requirements {
		if r.Key == ReservationIDLabelKey && r.Operator == karpv1.NodeSelectorOpIn && len(r.Values) == 1 {
			return r.Values[0]
		}
	}
	return ""
}

// PinReservation narrows reqs to a machine of the reserved offering o of the instance type named
// it: capacity type reserved, o's zone, the type and o's reservation id, each one value without
// minValues (requirements.Pin) — the requirements PinnedReservation reads back, and the only ones
// a provider launches into a reservation.
func PinReservation(reqs *requirements.Requirements, it string, o Offering) {
	reqs.Pin(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeReserved)
	reqs.Pin(karpv1.ZoneLabelKey, o.Zone)
	reqs.Pin(karpv1.InstanceTypeLabelKey, it)
	reqs.Pin(ReservationIDLabelKey, o.ReservationID)
}

// WithOfferings returns a copy of it with more offerings (reserved ones, say), its zone,
// capacity-type and reservation-id requirements widened to them.
func WithOfferings(it *InstanceType, more ...Offering) *InstanceType {
	c := *it
	c.Offerings = append(slices.Clip(it.Offerings), more...)
	c.Requirements = it.Requirements.Clone()
	setOfferingRequirements(&c.Requirements, c.Offerings)
	return &c
}

// LessPinned returns its with each reserved offering's ReservationCapacity less the NodeClaims
// that hold its reservation — launched or not, being deleted or not (a machine holds its slot
// until it is gone). The ledger is the NodeClaims themselves, so it survives restarts and is the
// same for every planner reading them.
func LessPinned(its []*InstanceType, claims []karpv1.NodeClaim) []*InstanceType {
	held := map[string]int{}
	for i := range claims {
		if id := PinnedReservation(&claims[i]); id != "" {
			held[id]++
		}
	}
	return WithReservationCapacity(its, func(id string, n int) int { return n - held[id] })
}

// WithReservationCapacity returns its with each reserved offering's ReservationCapacity set to
// left(its reservation, its capacity), unavailable when nothing is left. Types without reserved
// offerings are returned as they are; the others are copies (its may be a provider's cache).
func WithReservationCapacity(its []*InstanceType, left func(id string, n int) int) []*InstanceType {
	out := its
	copied := false
	for i, it := range its {
		if !slices.ContainsFunc(it.Offerings, func(o Offering) bool { return o.ReservationID != "" }) {
			continue
		}
		if !copied {
			out, copied = slices.Clone(its), true
		}
		c := *it
		c.Offerings = slices.Clone(it.Offerings)
		for j := range c.Offerings {
			o := &c.Offerings[j]
			if o.ReservationID == "" {
				continue
			}
			o.ReservationCapacity = max(0, left(o.ReservationID, o.ReservationCapacity))
			if o.ReservationCapacity == 0 {
				o.Available = false
			}
		}
		out[i] = &c
	}
	return out
}

// CreditReservation returns its with one more machine in the reservation id, offered again
// if it had none left: what the reservation will have once a machine that holds it is gone.
func CreditReservation(its []*InstanceType, id string) []*InstanceType {
	out := WithReservationCapacity(its, func(r string, n int) int {
		if r == id {
			return n + 1
		}
		return n
	})
	for _, it := range out {
		for j := range it.Offerings {
			if o := &it.Offerings[j]; o.ReservationID == id {
				o.Available = true
			}
		}
	}
	return out
}

// CapacityBlockDrainLead is how long before a capacity block ends its machines are drained and
// it takes no more launches: EC2 starts terminating a block's instances 30 minutes before its
// end and warns 10 minutes before that, so Capstan moves the pods off first, as Karpenter does.
const CapacityBlockDrainLead = 40 * time.Minute

// Reservation is what a provider knows of a capacity reservation its classes hold.
type Reservation struct {
	// Type is default or capacity-block.
	Type string
	// End is when it ends (zero: never).
	End time.Time
}

// ReservationReporter is a provider whose classes hold capacity reservations.
type ReservationReporter interface {
	// Reservations are the capacity reservations the provider's classes resolve, by id.
	Reservations(ctx context.Context) (map[string]Reservation, error)
}

// Reservations asks the provider (under its deadlines) for the capacity reservations its
// classes hold; providers without any answer nil.
func Reservations(ctx context.Context, cp CloudProvider) (map[string]Reservation, error) {
	if d, ok := cp.(*deadlined); ok {
		return call(ctx, "Reservations", d.d.Get, func(ctx context.Context) (map[string]Reservation, error) {
			return Reservations(ctx, d.cp)
		})
	}
	if rr, ok := cp.(ReservationReporter); ok {
		return rr.Reservations(ctx)
	}
	return nil, nil
}
