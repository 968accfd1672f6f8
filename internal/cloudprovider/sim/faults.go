package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Faults makes the simulated cloud's API misbehave as a real cloud's does under load, for the
// chaos suite: a share of its calls (Create, Delete, Get, List) fail — throttled or a server
// error, at random — and a share hang until the caller gives up (the provider's deadlines,
// docs/reliability.md). A Create's fault comes before the launch or after it (the machine runs,
// the answer is lost) with equal chance. Each call has its own sequence of draws from the seed,
// so which of, say, the Creates fail follows from the seed alone, however the calls interleave.
type Faults struct {
	// ErrorPercent and HangPercent are the shares of calls, 0–100 together.
	ErrorPercent, HangPercent int
	// Seed fixes the draws; 0 leaves the choice to the caller (the operator takes its start
	// time).
	Seed uint64
}

// ParseFaults reads "errors=N,hangs=M,seed=S" (percentages and a seed above 0; each may be left
// out; "" is none).
func ParseFaults(s string) (Faults, error) {
	var f Faults
	if strings.TrimSpace(s) == "" {
		return f, nil
	}
	for part := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if k == "seed" {
			seed, err := strconv.ParseUint(v, 10, 64)
			if !ok || err != nil || seed == 0 {
				return Faults{}, fmt.Errorf("%q: want seed=S, S a whole number above 0", part)
			}
			f.Seed = seed
			continue
		}
		n, err := strconv.Atoi(strings.TrimSuffix(v, "%"))
		if !ok || err != nil || n < 0 || n > 100 {
			return Faults{}, fmt.Errorf("%q: want errors=N or hangs=N, N a percentage (0–100)", part)
		}
		switch k {
		case "errors":
			f.ErrorPercent = n
		case "hangs":
			f.HangPercent = n
		default:
			return Faults{}, fmt.Errorf("%q: unknown fault %q (errors, hangs, seed)", part, k)
		}
	}
	if f.ErrorPercent+f.HangPercent > 100 {
		return Faults{}, fmt.Errorf("errors=%d and hangs=%d add up to more than 100%%", f.ErrorPercent, f.HangPercent)
	}
	return f, nil
}

// FaultError is an API call of the simulated cloud that failed by injection.
type FaultError struct {
	// Call is the provider method; Throttled says whether the cloud refused for the rate
	// (else it answered a server error); AfterLaunch says a Create launched before failing.
	Call        string
	Throttled   bool
	AfterLaunch bool
}

func (e *FaultError) Error() string {
	what := "InternalError (HTTP 503)"
	if e.Throttled {
		what = "RequestLimitExceeded (throttled)"
	}
	if e.AfterLaunch {
		return fmt.Sprintf("simulated cloud: %s: %s after the machine was launched", e.Call, what)
	}
	return fmt.Sprintf("simulated cloud: %s: %s", e.Call, what)
}

// fault is what one call gets.
type fault int

const (
	noFault fault = iota
	errorFault
	hangFault
)

// injector draws faults, one sequence per call; nil injects none.
type injector struct {
	f    Faults
	seed uint64
	mu   sync.Mutex
	rngs map[string]*rand.Rand
}

func newInjector(f Faults, seed uint64) *injector {
	if f.ErrorPercent == 0 && f.HangPercent == 0 {
		return nil
	}
	return &injector{f: f, seed: seed, rngs: map[string]*rand.Rand{}}
}

// draw picks a fault for a call, and for an error whether it is throttling and for a Create
// whether it comes after the launch.
func (i *injector) draw(call string) (f fault, throttled, after bool) {
	if i == nil {
		return noFault, false, false
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	rng := i.rngs[call]
	if rng == nil {
		h := fnv.New64a()
		_, _ = h.Write([]byte(call))
		rng = rand.New(rand.NewPCG(i.seed, h.Sum64()))
		i.rngs[call] = rng
	}
	n := rng.IntN(100)
	throttled, after = rng.IntN(2) == 0, rng.IntN(2) == 0
	switch {
	case n < i.f.ErrorPercent:
		return errorFault, throttled, after
	case n < i.f.ErrorPercent+i.f.HangPercent:
		return hangFault, throttled, after
	}
	return noFault, false, false
}

// inject carries out a drawn fault: an error, or a wait until ctx ends.
func inject(ctx context.Context, call string, f fault, throttled, after bool) error {
	switch f {
	case errorFault:
		log.FromContext(ctx).Info("simulated cloud fault", "call", call, "fault", "error", "throttled", throttled, "after-launch", after)
		return &FaultError{Call: call, Throttled: throttled, AfterLaunch: after}
	case hangFault:
		log.FromContext(ctx).Info("simulated cloud fault", "call", call, "fault", "hang", "after-launch", after)
		<-ctx.Done()
		return fmt.Errorf("simulated cloud: %s hung: %w", call, context.Cause(ctx))
	}
	return nil
}

// SetFaults makes the provider's API calls fail or hang as f says, drawn from seed.
func (p *Provider) SetFaults(f Faults, seed uint64) { p.faults = newInjector(f, seed) }

// before injects a call's fault that comes before its work (every fault but a Create's that
// comes after the launch).
func (p *Provider) before(ctx context.Context, call string) (after func() error, err error) {
	f, throttled, afterLaunch := p.faults.draw(call)
	if call == "Create" && afterLaunch {
		return func() error { return inject(ctx, call, f, throttled, true) }, nil
	}
	return func() error { return nil }, inject(ctx, call, f, throttled, false)
}
