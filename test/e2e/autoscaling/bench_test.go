package autoscaling

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/test/e2e"
)

// BenchmarkThousandPendingPods measures, on the local cluster, the time from creating a
// deployment of 1,000 pods to the last NodeClaim created, and to all pods Running, without a
// limit and with `cpu: 2000` (far above the need: it must not slow the burst). It also counts the
// Nodes whose allocatable differs from their NodeClaim's (must be 0), and reports Capstan's CPU
// time during the burst and its peak RSS.
//
//	go test -run XXX -bench ThousandPendingPods -benchtime 1x ./test/e2e/autoscaling/
//
// CAPSTAN_E2E_KCM_QPS=200 lets the controller manager create the pods faster than Kubernetes'
// default of 20 API writes per second (which alone takes ~50 s for 1,000 pods).
func BenchmarkThousandPendingPods(b *testing.B) {
	for _, limit := range []string{"none", "2000"} {
		b.Run("cpu-limit="+limit, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				burst(b, fmt.Sprintf("e2e-bench-%s-%d", limit, i), 1000, limit)
			}
		})
	}
}

// BenchmarkFiveThousandPendingPods is the same for a 5,000-pod deployment, without a limit.
//
//	CAPSTAN_E2E_KCM_QPS=200 go test -run XXX -bench FiveThousandPendingPods -benchtime 1x -timeout 30m ./test/e2e/autoscaling/
func BenchmarkFiveThousandPendingPods(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		burst(b, fmt.Sprintf("e2e-bench5k-%d", i), 5000, "none")
	}
}

// burst runs one deployment of n pods (250m, 256Mi) against a new pool with the CPU limit
// ("none" for none) and reports the figures, then scales it to zero.
func burst(b *testing.B, name string, n int32, limit string) {
	pool(b, name, nil, func(np *karpv1.NodePool) {
		if limit != "none" {
			np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
		}
	})
	cpuBefore := capstanCPU(b)
	start := time.Now()
	d := deployment(b, name, name, n, "250m", "256Mi", nil)
	eventually(b, fmt.Sprintf("%d pods Running", n), 20*time.Minute, running(b, name, int(n)))
	running := time.Since(start)
	ncs := claims(b, name)
	last, mismatched := e2e.ClaimFigures(b.Context(), s.Client, ncs)
	var lastPod time.Time
	for _, p := range pods(b, name) {
		if p.CreationTimestamp.After(lastPod) {
			lastPod = p.CreationTimestamp.Time
		}
	}
	b.ReportMetric(last.Sub(start.Truncate(time.Second)).Seconds(), "s-to-last-nodeclaim")
	// The controller manager creates the pods over a while (it is throttled, and on a loaded
	// API server slower still); no autoscaler can plan a pod before it exists. This is Capstan's
	// own share: from the last pod's creation to the last claim's (both in whole seconds).
	b.ReportMetric(last.Sub(lastPod).Seconds(), "s-last-pod-to-last-nodeclaim")
	b.ReportMetric(lastPod.Sub(start.Truncate(time.Second)).Seconds(), "s-to-last-pod")
	b.ReportMetric(running.Seconds(), "s-to-all-running")
	b.ReportMetric(float64(len(ncs)), "nodeclaims")
	b.ReportMetric(float64(mismatched), "nodes-not-their-machine")
	b.ReportMetric((capstanCPU(b) - cpuBefore).Seconds(), "capstan-cpu-s")
	b.ReportMetric(float64(capstanPeakRSS(b))/(1<<20), "capstan-peak-rss-MiB")
	// The figures stand only if the run was right: every Node is its claim's machine, every
	// claim bought one machine, and a limited pool launched no more than its limit.
	if mismatched != 0 {
		b.Errorf("%d registered NodeClaims have no Node with their allocatable", mismatched)
	}
	_, creates := cloudState(b)
	launched := resource.Quantity{}
	for _, nc := range ncs {
		if creates[nc.Name] != 1 {
			b.Errorf("NodeClaim %s launched %d machines", nc.Name, creates[nc.Name])
		}
		launched.Add(nc.Status.Capacity[corev1.ResourceCPU])
	}
	if limit != "none" && launched.Cmp(resource.MustParse(limit)) > 0 {
		b.Errorf("launched %s CPU against a limit of %s", launched.String(), limit)
	}
	scale(b, d, 0)
}

// capstanCPU is the CPU time (user + system) the running capstan process has used so far.
func capstanCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := e2e.ProcessCPU(s.Cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// capstanPeakRSS is the capstan process's peak resident set size in bytes since it started.
func capstanPeakRSS(tb testing.TB) int64 {
	tb.Helper()
	n, err := e2e.ProcessPeakRSS(s.Cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
