package report_test

import (
	"context"
	"os"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/yaml"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/report"
	"capstan.dev/capstan/internal/trace"
)

// BenchmarkReplayDiurnal plays examples/traces/diurnal.yaml (24 simulated hours, up to 1,000 pods,
// 1-minute steps) under the example WhenEmptyOrUnderutilized configuration, and reports the day's
// cost and evictions beside the time it took.
func BenchmarkReplayDiurnal(b *testing.B) {
	f, err := os.Open("../../examples/traces/diurnal.yaml")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.Read(f)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := os.ReadFile("../../examples/replay/whenemptyorunderutilized.yaml")
	if err != nil {
		b.Fatal(err)
	}
	np := &karpv1.NodePool{}
	if err := yaml.UnmarshalStrict(raw, np); err != nil {
		b.Fatal(err)
	}
	p, err := sim.NewProvider(nil, nil, clocktesting.NewFakeClock(time.Time{}), nil)
	if err != nil {
		b.Fatal(err)
	}
	its, err := p.InstanceTypes(context.Background(), &simv1alpha1.SimNodeClass{})
	if err != nil {
		b.Fatal(err)
	}
	var runs []report.Run
	for b.Loop() {
		if runs, err = report.Play(tr, []report.Config{{Name: np.Name, NodePool: np, InstanceTypes: its, PodDeletionCost: true}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(runs[0].Totals.CostHours, "$")
	b.ReportMetric(float64(runs[0].Totals.Evictions), "evictions")
}
