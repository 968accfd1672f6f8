// Package periodic runs a sync function on an interval, for controllers that sweep rather than
// react to events (garbage collection, the simulated machines' registration).
package periodic

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Run calls sync every interval until ctx ends, logging its errors with what as the message; it
// always returns nil, as controller-runtime's Runnable.Start may.
func Run(ctx context.Context, interval time.Duration, what string, sync func(context.Context) error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := sync(ctx); err != nil {
				log.FromContext(ctx).Error(err, what)
			}
		}
	}
}
