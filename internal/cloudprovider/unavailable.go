package cloudprovider

import (
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// UnavailableOfferings remembers offerings that recently failed with insufficient capacity, so
// that instance types report them unavailable for a while and the solver plans elsewhere.
type UnavailableOfferings struct {
	clock clock.PassiveClock
	ttl   time.Duration

	mu    sync.Mutex
	until map[OfferingKey]time.Time
}

// DefaultUnavailableTTL is how long an offering stays unavailable after an insufficient-capacity
// error.
const DefaultUnavailableTTL = 3 * time.Minute

// NewUnavailableOfferings returns an empty cache.
func NewUnavailableOfferings(c clock.PassiveClock, ttl time.Duration) *UnavailableOfferings {
	return &UnavailableOfferings{clock: c, ttl: ttl, until: map[OfferingKey]time.Time{}}
}

// MarkUnavailable records that the offering failed now.
func (u *UnavailableOfferings) MarkUnavailable(k OfferingKey) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.until[k] = u.clock.Now().Add(u.ttl)
}

// IsUnavailable reports whether the offering failed within the TTL.
func (u *UnavailableOfferings) IsUnavailable(k OfferingKey) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.until[k]
	if ok && !u.clock.Now().Before(t) {
		delete(u.until, k)
		return false
	}
	return ok
}

// Apply returns copies of its whose offerings are marked unavailable where an entry says so; the
// types themselves (often cached by a provider) are not touched. A nil cache marks nothing.
func (u *UnavailableOfferings) Apply(its []*InstanceType) []*InstanceType {
	out := make([]*InstanceType, len(its))
	for i, it := range its {
		c := *it
		c.Offerings = slices.Clone(it.Offerings)
		for j := range c.Offerings {
			o := &c.Offerings[j]
			if u != nil && u.IsUnavailable(OfferingKey{InstanceType: c.Name, Zone: o.Zone, CapacityType: o.CapacityType, ReservationID: o.ReservationID}) {
				o.Available = false
			}
		}
		out[i] = &c
	}
	return out
}
