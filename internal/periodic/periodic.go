// Package periodic runs a sync function on an interval, for controllers that sweep rather than
// react to events (garbage collection, the simulated machines' registration).
package periodic

import (
	"context"
	"time"

	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Run calls sync every interval of clk (after each call ends) until ctx ends, logging its errors
// with what as the message; it always returns nil, as controller-runtime's Runnable.Start may.
func Run(ctx context.Context, clk clock.Clock, interval time.Duration, what string, sync func(context.Context) error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-clk.After(interval):
			if err := sync(ctx); err != nil {
				log.FromContext(ctx).Error(err, what)
			}
		}
	}
}
