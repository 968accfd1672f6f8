package nodeclaims

import "sync"

// Launches tracks the NodeClaims whose cloud launch is in flight in this process, so that
// termination does not let a claim go while the machine bought for it is not yet recorded on it.
// The zero value is ready; a nil *Launches tracks nothing.
type Launches struct {
	mu    sync.Mutex
	names map[string]int
}

// Begin records that a launch for the claim started.
func (l *Launches) Begin(name string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]int{}
	}
	l.names[name]++
}

// End records that a launch for the claim finished and its result was saved (or failed).
func (l *Launches) End(name string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names[name] <= 1 {
		delete(l.names, name)
		return
	}
	l.names[name]--
}

// InFlight reports whether a launch for the claim is in flight.
func (l *Launches) InFlight(name string) bool {
	if l == nil {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.names[name] > 0
}
