package aws

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/e2e"
)

// BenchmarkThousandPendingPodsAWS is the 1,000-pod burst (250m/256Mi, amd64, spot and
// on-demand) on the AWS provider through the local endpoints: time to the last NodeClaim and to
// all pods Running, NodeClaims, CreateFleet calls, instances per claim (must be 1), Nodes whose
// allocatable differs from their claim's (must be 0), and Capstan's CPU time.
//
//	CAPSTAN_E2E_KCM_QPS=200 go test -run XXX -bench ThousandPendingPodsAWS -benchtime 1x ./test/e2e/aws/
func BenchmarkThousandPendingPodsAWS(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench-%d", i)
		pool(b, name, req(corev1.LabelArchStable, karpv1.NodeSelectorOpIn, "amd64"))
		fleets, cpu := s.aws.Calls("CreateFleet"), capstanCPU(b)
		start := time.Now()
		d := workersOf(b, name, 1000, "250m", "256Mi", map[string]string{"pool": name}, nil)
		eventually(b, "1,000 pods Running", 20*time.Minute, running(b, name, 1000))
		took := time.Since(start)
		ncs := claims(b, name)
		last, mismatched := e2e.ClaimFigures(b.Context(), s.Client, ncs)
		extra := 0
		for _, nc := range ncs {
			if n := len(s.aws.LiveInstances(aws.NodeClaimTag, nc.Name)); n != 1 {
				extra++
			}
		}
		b.ReportMetric(last.Sub(start.Truncate(time.Second)).Seconds(), "s-to-last-nodeclaim")
		b.ReportMetric(took.Seconds(), "s-to-all-running")
		b.ReportMetric(float64(len(ncs)), "nodeclaims")
		b.ReportMetric(float64(s.aws.Calls("CreateFleet")-fleets), "createfleet-calls")
		b.ReportMetric(float64(extra), "claims-without-one-instance")
		b.ReportMetric(float64(mismatched), "nodes-not-their-machine")
		b.ReportMetric((capstanCPU(b) - cpu).Seconds(), "capstan-cpu-s")
		scaleTo(b, d, 0)
	}
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
