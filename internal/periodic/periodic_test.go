package periodic_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"capstan.dev/capstan/internal/periodic"
)

// Sync runs once per interval of the injected clock, and an error does not stop the sweeps.
func TestRunsOnTheInjectedClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- periodic.Run(ctx, clk, 10*time.Second, "sweeping", func(context.Context) error {
			calls.Add(1)
			return errors.New("one sweep failed")
		})
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 30 s: %s", what)
			}
		}
	}
	for want := int32(1); want <= 3; want++ {
		waitFor("the sweep waits on the clock", clk.HasWaiters)
		clk.Step(9 * time.Second)
		if got := calls.Load(); got != want-1 {
			t.Fatalf("%d sweeps before the interval passed, want %d", got, want-1)
		}
		clk.Step(time.Second)
		waitFor("the sweep ran", func() bool { return calls.Load() == want })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
