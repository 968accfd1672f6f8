package sim

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// With every call failing, each of the API's calls returns a FaultError; a Create that fails
// after its launch leaves the machine running, and the retry (faults off) finds that machine
// instead of launching a second.
func TestInjectedAPIErrors(t *testing.T) {
	nodeClass(t, "api-errors", nil)
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProvider(t, clk, "")
	var launchedFirst string
	for seed := uint64(0); launchedFirst == "" && seed < 64; seed++ {
		p.SetFaults(Faults{ErrorPercent: 100}, seed)
		name := fmt.Sprintf("api-errors-%d", seed)
		_, err := p.Create(t.Context(), claim(name, "api-errors"))
		var fe *FaultError
		if !errors.As(err, &fe) || fe.Call != "Create" {
			t.Fatalf("Create: err = %v, want an injected fault", err)
		}
		if inst, ok := p.Cloud().existing(name); ok != fe.AfterLaunch {
			t.Fatalf("a fault after launch = %v, but a machine launched = %v", fe.AfterLaunch, ok)
		} else if ok {
			launchedFirst = name
			p.SetFaults(Faults{}, 0)
			got, err := p.Create(t.Context(), claim(name, "api-errors"))
			if err != nil {
				t.Fatal(err)
			}
			if got.Status.ProviderID != inst.ProviderID() || p.Cloud().CreateCount(name) != 1 {
				t.Errorf("the retry got %s after %d launches, want the first launch's %s", got.Status.ProviderID, p.Cloud().CreateCount(name), inst.ProviderID())
			}
		}
	}
	if launchedFirst == "" {
		t.Fatal("no seed drew a fault after the launch")
	}
	p.SetFaults(Faults{ErrorPercent: 100}, 1)
	nc := claim(launchedFirst, "api-errors")
	_, getErr := p.Get(t.Context(), "sim:///zone-a/i-0")
	_, listErr := p.List(t.Context())
	for call, err := range map[string]error{"Get": getErr, "List": listErr, "Delete": p.Delete(t.Context(), nc)} {
		var fe *FaultError
		if !errors.As(err, &fe) || fe.Call != call {
			t.Errorf("%s: err = %v, want an injected fault", call, err)
		}
	}
}

// Which Creates fail follows from the seed alone: other calls drawn between them (as a
// controller's timing interleaves them) change nothing, so a chaos run's seed fixes its Create
// faults.
func TestFaultsOfACallFollowTheSeedAlone(t *testing.T) {
	creates := func(i *injector, between ...string) (got []fault) {
		for range 40 {
			for _, call := range between {
				i.draw(call)
			}
			f, _, _ := i.draw("Create")
			got = append(got, f)
		}
		return got
	}
	f := Faults{ErrorPercent: 30}
	alone := creates(newInjector(f, 4))
	if mixed := creates(newInjector(f, 4), "Get", "List", "Get", "Delete"); fmt.Sprint(mixed) != fmt.Sprint(alone) {
		t.Errorf("Create faults among other calls %v, alone %v: want the same", mixed, alone)
	}
	if other := creates(newInjector(f, 5)); fmt.Sprint(other) == fmt.Sprint(alone) {
		t.Errorf("seeds 4 and 5 drew the same Create faults %v", alone)
	}
}

// A hung call returns once its caller gives up, naming why.
func TestInjectedHangsEndWithTheCaller(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProvider(t, clk, "")
	p.SetFaults(Faults{HangPercent: 100}, 1)
	ctx, cancel := context.WithCancelCause(t.Context())
	done := make(chan error)
	go func() {
		_, err := p.List(ctx)
		done <- err
	}()
	cause := errors.New("the caller's deadline")
	cancel(cause)
	if err := <-done; !errors.Is(err, cause) {
		t.Errorf("List: err = %v, want it to end with %v", err, cause)
	}
}
