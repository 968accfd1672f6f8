package disruption

import (
	"context"

	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/snapshot"
)

// Snapshot reads the cluster from the cache as a round does, without the churn guard's evictions
// (which only this controller's rounds read): the pod deletion-cost ranking's view. It may run
// concurrently with rounds.
func (c *Controller) Snapshot(ctx context.Context) (*disruptionplan.Snapshot, error) {
	return c.snapshot(ctx, c.Options.withDefaults(), nil)
}

// snapshot reads the cluster from the cache (its own objects: the decision core and the solver
// only read them, and every write here reads its object again) with the rounds' memory of
// scale-downs.
func (c *Controller) snapshot(ctx context.Context, opts Options, evictions []disruptionplan.Eviction) (*disruptionplan.Snapshot, error) {
	return snapshot.Read(ctx, c.Client, c.Cloud, snapshot.Options{Now: c.Clock.Now(),
		Settings:      planning.Settings{NodeCost: opts.NodeCost, SpendingLimit: opts.SpendingLimit},
		ScaleDownWait: opts.Decision.ScaleDownWait, ScaleDowns: &c.scaleDowns, Evictions: evictions, Shared: true,
		DefaultSpread: opts.DefaultSpread, Buffers: opts.Buffers})
}
