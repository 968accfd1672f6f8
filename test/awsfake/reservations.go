package awsfake

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// CapacityReservation is an EC2 capacity reservation: machines of one type in one zone held for
// the account (an on-demand capacity reservation, or a capacity block for ML).
type CapacityReservation struct {
	ID, InstanceType, Zone string
	// Total is how many instances it holds.
	Total int
	// OwnerID is the owning account (the fake's account when empty).
	OwnerID string
	// MatchCriteria is targeted (launches must name it) or open; the fake launches into either
	// only when a launch names it.
	MatchCriteria string
	// Type is default or capacity-block.
	Type string
	// State is active, expired, cancelled, …
	State string
	// EndTime is when it ends (zero: never).
	EndTime time.Time
	// Interruptible reservations may be reclaimed.
	Interruptible bool
	Tags          map[string]string
}

// AddCapacityReservation creates (or replaces) a capacity reservation; defaults: active,
// targeted, default, the fake's account.
func (s *Server) AddCapacityReservation(r CapacityReservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.OwnerID == "" {
		r.OwnerID = s.account
	}
	if r.MatchCriteria == "" {
		r.MatchCriteria = "targeted"
	}
	if r.Type == "" {
		r.Type = "default"
	}
	if r.State == "" {
		r.State = "active"
	}
	r.Tags = maps.Clone(r.Tags)
	s.reservations[r.ID] = &r
}

// SetCapacityReservationState changes a reservation's state. Expired or cancelled, it takes no
// more launches and is no longer described as active, and its instances go as EC2 moves them:
// a default reservation's run on as plain on-demand instances, a capacity block's terminate.
func (s *Server) SetCapacityReservationState(id, state string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reservations[id]
	if r == nil {
		return
	}
	r.State = state
	if state != "expired" && state != "cancelled" {
		return
	}
	for _, inst := range s.instances {
		if inst.CapacityReservationID != id {
			continue
		}
		if r.Type == "capacity-block" && (inst.State == "pending" || inst.State == "running") {
			inst.State, inst.TerminatedAt = "terminated", s.clock.Now()
		}
		inst.CapacityReservationID = ""
	}
}

// InReservation is how many live instances a reservation holds.
func (s *Server) InReservation(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inReservationLocked(id)
}

func (s *Server) inReservationLocked(id string) int {
	n := 0
	for _, inst := range s.instances {
		if inst.CapacityReservationID == id && (inst.State == "pending" || inst.State == "running") {
			n++
		}
	}
	return n
}

func (s *Server) describeCapacityReservations(f form) (*el, *apiError) {
	ids, fs := f.List("CapacityReservationId"), f.filters()
	for _, id := range ids {
		if s.reservations[id] == nil {
			return nil, errorf("InvalidCapacityReservationId.NotFound", "The capacity reservation ID '%s' does not exist", id)
		}
	}
	var sel []*CapacityReservation
	for _, id := range sortedKeys(s.reservations) {
		r := s.reservations[id]
		if len(ids) > 0 && !slices.Contains(ids, id) {
			continue
		}
		if !matchFilters(fs, func(name string) []string {
			if v, ok := tagAttributes(r.Tags, name); ok {
				return v
			}
			switch name {
			case "owner-id":
				return []string{r.OwnerID}
			case "instance-match-criteria":
				return []string{r.MatchCriteria}
			case "state":
				return []string{r.State}
			case "instance-type":
				return []string{r.InstanceType}
			case "availability-zone":
				return []string{r.Zone}
			case "reservation-type":
				return []string{r.Type}
			}
			return nil
		}) {
			continue
		}
		sel = append(sel, r)
	}
	sel, next := page(f, sel)
	var out []*el
	for _, r := range sel {
		used := s.inReservationLocked(r.ID)
		e := E("", T("capacityReservationId", r.ID), T("ownerId", r.OwnerID), T("instanceType", r.InstanceType),
			T("availabilityZone", r.Zone), T("totalInstanceCount", strconv.Itoa(r.Total)),
			T("availableInstanceCount", strconv.Itoa(max(0, r.Total-used))), T("instanceMatchCriteria", r.MatchCriteria),
			T("state", r.State), T("reservationType", r.Type), T("interruptible", strconv.FormatBool(r.Interruptible)),
			T("instancePlatform", "Linux/UNIX"), T("tenancy", "default"), tagSet(r.Tags))
		if !r.EndTime.IsZero() {
			e.kids = append(e.kids, T("endDate", r.EndTime.UTC().Format(time.RFC3339)), T("endDateType", "limited"))
		}
		out = append(out, e)
	}
	return E("", Set("capacityReservationSet", out), Opt("nextToken", next)), nil
}

// reservationRefusal is why a launch into the reservation named by a launch template cannot
// happen (its error code and message), or "" when it can.
func (s *Server) reservationRefusal(id, instanceType, zone string) (code, msg string) {
	r := s.reservations[id]
	switch {
	case r == nil:
		return "InvalidCapacityReservationId.NotFound", fmt.Sprintf("The capacity reservation ID '%s' does not exist", id)
	case r.State != "active" || !r.EndTime.IsZero() && !s.clock.Now().Before(r.EndTime):
		return "InvalidCapacityReservationId.Malformed", fmt.Sprintf("The capacity reservation %s is %s", id, r.State)
	case r.InstanceType != instanceType || r.Zone != zone:
		return "InvalidParameterCombination", fmt.Sprintf("The capacity reservation %s holds %s in %s, not %s in %s", id, r.InstanceType, r.Zone, instanceType, zone)
	case s.inReservationLocked(id) >= r.Total:
		return "ReservationCapacityExceeded", fmt.Sprintf("There is not enough capacity left in capacity reservation %s", id)
	}
	return "", ""
}
