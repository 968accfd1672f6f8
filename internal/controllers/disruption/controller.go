package disruption

import (
	"context"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/snapshot"
)

// Defaults of Options.
const (
	DefaultPollPeriod         = 10 * time.Second
	DefaultValidationPeriod   = 15 * time.Second
	DefaultReplacementTimeout = 10 * time.Minute
	// DefaultFailureBackoff is how long after a rolled-back command no new command is decided.
	DefaultFailureBackoff = time.Minute
)

// Options tune the controller.
type Options struct {
	// PollPeriod is the time between rounds when nothing is in flight (default 10s).
	PollPeriod time.Duration
	// ValidationPeriod is how long a decision waits before it is checked again and carried out
	// (default 15s, Karpenter's).
	ValidationPeriod time.Duration
	// ReplacementTimeout bounds the wait for a command's replacements to initialize; past it the
	// command is rolled back (default 10m).
	ReplacementTimeout time.Duration
	// FailureBackoff is the pause after a rollback (default 1m).
	FailureBackoff time.Duration
	// Decision are the decision core's options.
	Decision disruptionplan.Options
	// NodeCost is the per-node cost of pools without the annotation.
	NodeCost float64
	// SpendingLimit is the cluster's spending limit in dollars per hour (0: none): replacements
	// must fit what is left of it.
	SpendingLimit float64
	// Buffers are the CapacityBuffers' virtual pods, whose room consolidation keeps (nil: none).
	Buffers func(context.Context) ([]*corev1.Pod, error)
	// DefaultSpread gives the pods a command may move the cluster's default topology spread
	// constraints (SCHEDULER_CONFIG); nil gives none.
	DefaultSpread *defaultspread.Applier
	// MemoryConfigMap is where the churn guard's evictions are kept across restarts and
	// failovers; empty keeps them in this process only.
	MemoryConfigMap client.ObjectKey
}

func (o Options) withDefaults() Options {
	if o.PollPeriod <= 0 {
		o.PollPeriod = DefaultPollPeriod
	}
	if o.ValidationPeriod < 0 {
		o.ValidationPeriod = 0
	} else if o.ValidationPeriod == 0 {
		o.ValidationPeriod = DefaultValidationPeriod
	}
	if o.ReplacementTimeout <= 0 {
		o.ReplacementTimeout = DefaultReplacementTimeout
	}
	if o.FailureBackoff <= 0 {
		o.FailureBackoff = DefaultFailureBackoff
	}
	return o
}

// Controller runs disruption rounds. Only the leader runs it.
type Controller struct {
	Client client.Client
	// APIReader reads replacements without the cache, so that a replacement just created is
	// never taken for a missing one.
	APIReader client.Reader
	Cloud     cloudprovider.CloudProvider
	Clock     clock.Clock
	Recorder  events.EventRecorder
	// Metrics may be nil.
	Metrics *metrics.Metrics
	Options Options

	mu sync.Mutex
	// pending is a decision waiting for its validation period.
	pending *pendingCommand
	// active is the command being carried out, as this process knows it (the cache may not
	// show its annotations yet).
	active *commandState
	// backoffUntil pauses new decisions after a rollback.
	backoffUntil time.Time
	// evictions are the pods consolidation evicted, for the churn guard; memoryLoaded says
	// whether those a previous leader saved were read.
	evictions    []disruptionplan.Eviction
	memoryLoaded bool
	// told remembers the last explanation emitted per node, to emit once per change.
	told map[string]string
	// done remembers commands finished or rolled back here, so that a cache that still shows
	// their annotations does not make them run again.
	done map[string]time.Time
	// scaleDowns remembers the owners seen shrinking.
	scaleDowns snapshot.ScaleDowns
}

type pendingCommand struct {
	cmd *disruptionplan.Command
	at  time.Time
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "disruption" }

// NeedLeaderElection makes only the leader disrupt.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs rounds until ctx ends. It implements controller-runtime's Runnable.
func (c *Controller) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("controller", c.Name()))
	for {
		wait, err := c.Round(ctx)
		if err != nil {
			log.FromContext(ctx).Error(err, "disruption round")
			wait = c.Options.withDefaults().PollPeriod
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.Clock.After(wait):
		}
	}
}

// Round does one step of disruption and says when to come back: it advances the command in
// flight if there is one; else it carries out a decision whose validation period has passed, or
// makes a new decision.
func (c *Controller) Round(ctx context.Context) (time.Duration, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	opts := c.Options.withDefaults()
	if err := c.loadMemory(ctx); err != nil {
		return opts.PollPeriod, err
	}
	inFlight, wait, err := c.advance(ctx, opts)
	if err != nil || inFlight {
		return wait, err
	}
	now := c.Clock.Now()
	if now.Before(c.backoffUntil) {
		return c.backoffUntil.Sub(now), nil
	}
	snap, err := c.snapshot(ctx, opts, slices.Clone(c.evictions))
	if err != nil {
		return 0, err
	}
	if p := c.pending; p != nil {
		if left := p.at.Add(opts.ValidationPeriod).Sub(now); left > 0 {
			return left, nil
		}
		c.pending = nil
		cmd, why := disruptionplan.Validate(snap, opts.Decision, p.cmd)
		if cmd == nil {
			log.FromContext(ctx).Info("abandoning disruption command: it no longer holds", "method", p.cmd.Method,
				"candidates", candidateNames(p.cmd), "reason", why)
			return opts.PollPeriod, nil
		}
		return c.execute(ctx, opts, snap, cmd)
	}
	start := c.Clock.Now()
	dopts := opts.Decision
	dopts.Elapsed = func() time.Duration { return c.Clock.Since(start) }
	dec := disruptionplan.Decide(snap, dopts)
	c.report(ctx, snap, dec)
	c.plan(ctx, snap, dec)
	if dec.Command == nil {
		return opts.PollPeriod, nil
	}
	if opts.ValidationPeriod == 0 || dec.Command.Method == disruptionplan.MethodDrift {
		// A drift is carried out at once, as Karpenter's (which validates emptiness and
		// consolidation only): its candidates stay drifted, and waiting would add the period
		// to every node of a rollout.
		return c.execute(ctx, opts, snap, dec.Command)
	}
	c.pending = &pendingCommand{cmd: dec.Command, at: now}
	return opts.ValidationPeriod, nil
}
