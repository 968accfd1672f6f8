// Package ownwrites tells a controller when its informer cache still shows an object as it was
// before the controller's own last write.
//
// A controller that patches an object and is then triggered again (by someone else's change, or
// by its own first patch of two) may read the object from a cache that has not seen the second
// write yet. Acting on that view repeats side effects already done: a launch called again, an
// event sent again, a status patch that can only conflict. Under load the lag is seconds; in a
// 5,000-pod burst a third of the claims were launched two to seven times. The Tracker remembers,
// per object, the resource versions its own writes replaced; a read that returns one of them is
// stale, and the watch event of the write is still on its way.
package ownwrites

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TTL bounds how long a write is remembered: long after it, a cache that still shows an older
// version is not lagging but relisting, and the tracker stops second-guessing it.
const TTL = time.Minute

// Tracker remembers the versions each object's own writes replaced. The zero value is not usable;
// use New.
type Tracker struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	byUID map[types.UID]written
	// swept is when expired records were last dropped.
	swept time.Time
}

type written struct {
	replaced []string
	at       time.Time
}

// New returns a Tracker on the clock.
func New(clk clock.PassiveClock) *Tracker {
	return &Tracker{clock: clk, byUID: map[types.UID]written{}}
}

// Wrote records that the caller's write took obj, as the server answered it, from each of the
// replaced resource versions to obj's. A write the server found to change nothing keeps its
// version, which is then not recorded as replaced. Versions already recorded for the object and
// not yet seen newer are kept.
func (t *Tracker) Wrote(obj client.Object, replaced ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	if now.Sub(t.swept) > TTL {
		// Objects deleted before a read showed the cache caught up are never looked at again.
		for uid, w := range t.byUID {
			if now.Sub(w.at) > TTL {
				delete(t.byUID, uid)
			}
		}
		t.swept = now
	}
	w := t.byUID[obj.GetUID()]
	if now.Sub(w.at) > TTL {
		w.replaced = nil
	}
	for _, rv := range replaced {
		if rv != "" && rv != obj.GetResourceVersion() {
			w.replaced = append(w.replaced, rv)
		}
	}
	if len(w.replaced) == 0 {
		return
	}
	w.at = now
	t.byUID[obj.GetUID()] = w
}

// Stale reports whether obj, as read, is a version the caller's own writes replaced. A read that
// is not stale ends the record: the cache has caught up, or someone wrote after the caller.
func (t *Tracker) Stale(obj client.Object) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.byUID[obj.GetUID()]
	if !ok {
		return false
	}
	if t.clock.Since(w.at) <= TTL {
		for _, rv := range w.replaced {
			if rv == obj.GetResourceVersion() {
				return true
			}
		}
	}
	delete(t.byUID, obj.GetUID())
	return false
}

// Forget drops what is remembered of the object (it is gone).
func (t *Tracker) Forget(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byUID, uid)
}

// Len is the number of objects remembered.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byUID)
}
