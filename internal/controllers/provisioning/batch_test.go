package provisioning

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"capstan.dev/capstan/internal/clocktest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

const (
	testIdle    = time.Second
	testMaxWait = 10 * time.Second
)

// startBatch runs nextBatch in the background; its result arrives on the channel.
func startBatch(ctx context.Context, p *Provisioner) <-chan bool {
	done := make(chan bool, 1)
	go func() { done <- p.nextBatch(ctx, testIdle, testMaxWait) }()
	return done
}

// waitForTimer blocks until nextBatch waits on the fake clock, or fails when nextBatch returned.
func waitForTimer(t *testing.T, fc *clocktesting.FakeClock, done <-chan bool) {
	t.Helper()
	for !fc.HasWaiters() {
		select {
		case <-done:
			t.Fatal("the batch ended before its window")
		default:
			time.Sleep(time.Millisecond)
		}
	}
}

// open fails when nextBatch has returned; it gives a wrong return a moment to show.
func open(t *testing.T, done <-chan bool, why string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal(why)
	case <-time.After(50 * time.Millisecond):
	}
}

// mustEnd fails unless nextBatch returns a batch (the clock has already moved far enough).
func mustEnd(t *testing.T, done <-chan bool, why string) {
	t.Helper()
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("nextBatch gave up without the context ending")
		}
	case <-time.After(30 * time.Second):
		t.Fatal(why)
	}
}

// trigger is a pod arriving; it returns once the batch took it in, so that the clock moves after
// the batch restarted its idle wait.
func trigger(p *Provisioner) {
	p.Trigger()
	for len(p.trigger) > 0 {
		time.Sleep(time.Millisecond)
	}
}

func TestBatchEndsAfterAnIdleSecond(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	p := &Provisioner{Clock: fc}
	p.Trigger()
	done := startBatch(t.Context(), p)
	waitForTimer(t, fc, done)
	fc.Step(testIdle / 2)
	open(t, done, "the batch ended before an idle second")
	fc.Step(testIdle / 2)
	mustEnd(t, done, "the batch did not end after an idle second")
}

// Pods that keep arriving hold a batch open, but not past BatchMax from its first pod.
func TestBatchEndsAtItsMaximum(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	p := &Provisioner{Clock: fc}
	p.Trigger()
	done := startBatch(t.Context(), p)
	waitForTimer(t, fc, done)
	step := testIdle / 2
	for waited := time.Duration(0); waited < testMaxWait-step; waited += step {
		fc.Step(step)
		trigger(p)
		open(t, done, "the batch ended although pods kept arriving")
	}
	fc.Step(step)
	mustEnd(t, done, "the batch outlived its maximum")
}

// A burst keeps pods arriving while a pass creates its claims: when that pass took longer than
// BatchMax, the pods that arrived during it have waited enough, and the next pass starts at once
// instead of opening a new window (which added BatchMax to every later pass of a 5,000-pod burst).
func TestBatchOpenedDuringALongPassGoesAtOnce(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	p := &Provisioner{Clock: fc}
	// A pod arrives while the previous pass runs, and the pass goes on past BatchMax.
	p.Trigger()
	fc.Step(testMaxWait + time.Second)
	done := startBatch(t.Context(), p)
	mustEnd(t, done, "the pods that arrived during a long pass were made to wait a new window")
	// The batch was taken: the next one opens with the next pod, and waits its idle second.
	p.Trigger()
	done = startBatch(t.Context(), p)
	waitForTimer(t, fc, done)
	open(t, done, "the next batch did not wait")
	fc.Step(testIdle)
	mustEnd(t, done, "the next batch did not end after an idle second")
}

// A pod that arrived during a short pass keeps the rest of its window, counted from its arrival.
func TestBatchOpenedDuringAShortPassKeepsItsWindow(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	p := &Provisioner{Clock: fc}
	p.Trigger()
	fc.Step(testMaxWait - 2*time.Second)
	done := startBatch(t.Context(), p)
	waitForTimer(t, fc, done)
	// Pods keep arriving: the batch ends 2s later, at its maximum, not 10s later.
	for range 3 {
		fc.Step(testIdle / 2)
		trigger(p)
		open(t, done, "the batch ended early")
	}
	fc.Step(testIdle / 2)
	mustEnd(t, done, "the batch did not end at its maximum, counted from its first pod")
}

func TestBatchWaitEndsWithTheContext(t *testing.T) {
	fc := clocktesting.NewFakeClock(time.Now())
	p := &Provisioner{Clock: fc}
	ctx, cancel := context.WithCancel(t.Context())
	p.Trigger()
	done := startBatch(ctx, p)
	waitForTimer(t, fc, done)
	cancel()
	if ok := <-done; ok {
		t.Fatal("nextBatch reported a batch after its context ended")
	}
}

// failingLister fails every List, as an API server that is down, and records when it was asked.
type failingLister struct {
	client.Client
	clk clock.PassiveClock
	mu  sync.Mutex
	at  []time.Time
}

func (f *failingLister) List(context.Context, client.ObjectList, ...client.ListOption) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at = append(f.at, f.clk.Now())
	return errors.New("the API server is down")
}

func (f *failingLister) attempts() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.at)
}

// Passes that fail in a row are retried after pauses that double from RetryAfterFailure, on the
// injected clock: an API server in trouble is not asked every 5 s.
func TestFailedPassesBackOff(t *testing.T) {
	clk := clocktest.Stepping{FakeClock: clocktesting.NewFakeClock(time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC))}
	fl := &failingLister{clk: clk}
	p := &Provisioner{Clock: clk, Client: fl}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	p.Trigger()
	go func() { _ = p.Start(ctx); close(done) }()
	for deadline := time.Now().Add(30 * time.Second); len(fl.attempts()) < 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s, %d passes", len(fl.attempts()))
		}
	}
	cancel()
	<-done
	at := fl.attempts()
	// Each batch on this clock waits its whole window (BatchMax, then the idle second): the gap
	// between passes is the retry's pause plus 11 s.
	for i, pause := range []time.Duration{RetryAfterFailure, 2 * RetryAfterFailure, 4 * RetryAfterFailure, 8 * RetryAfterFailure} {
		if gap, want := at[i+1].Sub(at[i]), pause+11*time.Second; gap != want {
			t.Errorf("pass %d came %s after the failed pass %d, want %s (a pause of %s)", i+2, gap, i+1, want, pause)
		}
	}
}
