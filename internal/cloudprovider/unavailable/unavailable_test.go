package unavailable

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"capstan.dev/capstan/internal/cloudprovider"
)

// An offering that fails again as soon as its time is up is kept out twice as long each time, up
// to MaxTTL; failures while it is out (a burst's launches failing together) do not
// lengthen it; a launch, or a long quiet, starts it from the shortest time again.
func TestUnavailableOfferingsBackOff(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC))
	u := New(clk, DefaultTTL)
	k := cloudprovider.OfferingKey{InstanceType: "g5.xlarge", Zone: "zone-a", CapacityType: "on-demand"}
	other := cloudprovider.OfferingKey{InstanceType: "g5.xlarge", Zone: "zone-b", CapacityType: "on-demand"}
	// out fails k now and returns how long it stays out, to the second.
	out := func() time.Duration {
		t.Helper()
		u.MarkUnavailable(k)
		var d time.Duration
		for u.IsUnavailable(k) {
			clk.Step(time.Second)
			d += time.Second
		}
		return d
	}
	for i, want := range []time.Duration{3 * time.Minute, 6 * time.Minute, 12 * time.Minute, 15 * time.Minute, 15 * time.Minute} {
		if i == 1 {
			// A burst's other launches fail while it is out: no longer for that.
			u.MarkUnavailable(k)
			for range 50 {
				u.MarkUnavailable(k)
			}
		}
		if got := out(); got != want {
			t.Fatalf("failure %d in a row kept the offering out %s, want %s", i+1, got, want)
		}
		if u.IsUnavailable(other) {
			t.Fatal("another zone's offering is out")
		}
	}
	u.MarkLaunched(k)
	if got := out(); got != DefaultTTL {
		t.Fatalf("after a launch the offering was kept out %s, want %s", got, DefaultTTL)
	}
	out()
	clk.Step(2*MaxTTL + time.Second)
	if got := out(); got != DefaultTTL {
		t.Fatalf("after a long quiet the offering was kept out %s, want %s", got, DefaultTTL)
	}
}
