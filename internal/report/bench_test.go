package report_test

import (
	"context"
	"os"
	"runtime/debug"
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
// 1-minute steps) under each example configuration (WhenEmptyOrUnderutilized, Balanced), and
// reports the day's cost and evictions beside the time it took. It collects garbage as
// kubectl capstan does (GOGC 400 unless GOGC is set).
func BenchmarkReplayDiurnal(b *testing.B) {
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(400))
	}
	f, err := os.Open("../../examples/traces/diurnal.yaml")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.Read(f)
	if err != nil {
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
	for _, name := range []string{"whenemptyorunderutilized", "balanced"} {
		b.Run("config="+name, func(b *testing.B) {
			raw, err := os.ReadFile("../../examples/replay/" + name + ".yaml")
			if err != nil {
				b.Fatal(err)
			}
			np := &karpv1.NodePool{}
			if err := yaml.UnmarshalStrict(raw, np); err != nil {
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
		})
	}
}
