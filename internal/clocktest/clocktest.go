// Package clocktest holds clocks for tests.
package clocktest

import (
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// Stepping is a fake clock whose After steps time at once and returns a fired channel: every wait
// ends as soon as it begins, in the order the waits begin, and the time waited can be read off the
// clock without racing the waiting goroutines.
type Stepping struct{ *clocktesting.FakeClock }

// After steps the clock by d and returns a channel holding the new time.
func (c Stepping) After(d time.Duration) <-chan time.Time {
	c.Step(d)
	ch := make(chan time.Time, 1)
	ch <- c.Now()
	return ch
}
