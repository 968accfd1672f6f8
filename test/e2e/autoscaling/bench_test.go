package autoscaling

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkThousandPendingPods measures, on the local cluster, the time from creating a
// deployment of 1,000 pods to the last NodeClaim created, and to all pods Running.
//
//	go test -run XXX -bench ThousandPendingPods -benchtime 1x ./test/e2e/autoscaling/
func BenchmarkThousandPendingPods(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("e2e-bench-%d", i)
		pool(b, name, nil, nil)
		start := time.Now()
		d := deployment(b, name, name, 1000, "250m", "256Mi", nil)
		eventually(b, "1,000 pods Running", 10*time.Minute, running(b, name, 1000))
		running := time.Since(start)
		var last time.Time
		ncs := claims(b, name)
		for _, nc := range ncs {
			if nc.CreationTimestamp.After(last) {
				last = nc.CreationTimestamp.Time
			}
		}
		b.ReportMetric(last.Sub(start.Truncate(time.Second)).Seconds(), "s-to-last-nodeclaim")
		b.ReportMetric(running.Seconds(), "s-to-all-running")
		b.ReportMetric(float64(len(ncs)), "nodeclaims")
		scale(b, d, 0)
	}
}
