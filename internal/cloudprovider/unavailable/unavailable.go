// Package unavailable remembers offerings that answered insufficient capacity, and for how long
// each stays out.
package unavailable

import (
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"capstan.dev/capstan/internal/cloudprovider"
)

// Offerings remembers offerings that recently failed with insufficient capacity, so
// that instance types report them unavailable for a while and the solver plans elsewhere. An
// offering that fails again once its time is up is kept out twice as long, up to
// MaxTTL: a shortage that lasts costs a launch attempt every quarter hour, not every
// three minutes. It starts from DefaultTTL again after it launches a machine, or after
// twice MaxTTL without a failure.
type Offerings struct {
	clock clock.PassiveClock

	mu      sync.Mutex
	until   map[cloudprovider.OfferingKey]time.Time
	backoff *flowcontrol.Backoff
}

// DefaultTTL is how long an offering stays unavailable after an insufficient-capacity
// error (Karpenter's fixed time), and MaxTTL how long after failures in a row.
const (
	DefaultTTL = 3 * time.Minute
	MaxTTL     = 15 * time.Minute
)

// New returns an empty cache whose first failure of an offering keeps it out
// for ttl, and a failure once that is up for twice as long, up to MaxTTL (or ttl, when
// longer).
func New(c clock.Clock, ttl time.Duration) *Offerings {
	b := flowcontrol.NewBackOff(ttl, max(ttl, MaxTTL))
	b.Clock = c
	return &Offerings{clock: c, until: map[cloudprovider.OfferingKey]time.Time{}, backoff: b}
}

// MarkUnavailable records that the offering failed now. The launches a burst has in flight fail
// together: a failure while the offering is out already does not lengthen its time. A nil cache
// records nothing.
func (u *Offerings) MarkUnavailable(k cloudprovider.OfferingKey) {
	if u == nil {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.clock.Now()
	if t, ok := u.until[k]; ok && now.Before(t) {
		return
	}
	key := id(k)
	u.backoff.Next(key, now)
	u.until[k] = now.Add(u.backoff.Get(key))
}

// MarkLaunched records that the offering launched a machine: its next failure keeps it out for
// the shortest time again. A nil cache records nothing.
func (u *Offerings) MarkLaunched(k cloudprovider.OfferingKey) {
	if u == nil {
		return
	}
	u.backoff.Reset(id(k))
}

// IsUnavailable reports whether the offering is kept out now.
func (u *Offerings) IsUnavailable(k cloudprovider.OfferingKey) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	t, ok := u.until[k]
	if ok && !u.clock.Now().Before(t) {
		delete(u.until, k)
		return false
	}
	return ok
}

func id(k cloudprovider.OfferingKey) string {
	return k.InstanceType + "/" + k.Zone + "/" + k.CapacityType + "/" + k.ReservationID
}

// Apply returns copies of its whose offerings are marked unavailable where an entry says so; the
// types themselves (often cached by a provider) are not touched. A nil cache marks nothing.
func (u *Offerings) Apply(its []*cloudprovider.InstanceType) []*cloudprovider.InstanceType {
	out := make([]*cloudprovider.InstanceType, len(its))
	for i, it := range its {
		c := *it
		c.Offerings = slices.Clone(it.Offerings)
		for j := range c.Offerings {
			o := &c.Offerings[j]
			if u != nil && u.IsUnavailable(cloudprovider.OfferingKey{InstanceType: c.Name, Zone: o.Zone, CapacityType: o.CapacityType, ReservationID: o.ReservationID}) {
				o.Available = false
			}
		}
		out[i] = &c
	}
	return out
}
