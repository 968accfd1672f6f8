package solver_test

import (
	"fmt"
	"testing"

	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

func BenchmarkKarpenterDiverse(b *testing.B) {
	its := workload.FakeInstanceTypes(400)
	for _, n := range []int{1, 100, 1000, 5000, 20000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			pods := workload.DiversePods(n, 42)
			in := solver.Input{Pods: pods, NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)}}
			var r *solver.Result
			b.ResetTimer()
			for b.Loop() {
				r = solver.Solve(in, solver.Options{})
			}
			b.StopTimer()
			if len(r.Unschedulable) > 0 {
				b.Fatalf("%d pods unschedulable, first: %s", len(r.Unschedulable), r.Unschedulable[0].Reason)
			}
			b.ReportMetric(float64(n)/(b.Elapsed().Seconds()/float64(b.N)), "pods/s")
			b.ReportMetric(float64(len(r.NodeClaims)), "nodes")
			b.ReportMetric(r.Price(), "$/h")
			b.ReportMetric(r.Price()/workload.LPBound(its, pods), "cost/LP")
		})
	}
}
