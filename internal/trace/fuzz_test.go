package trace_test

import (
	"bytes"
	"os"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/trace"
)

// FuzzRead: any file is either refused or read into a trace the replay can play: each workload's
// requests parse as quantities and its replica count is never negative over the trace.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"diurnal", "batch-bursts", "spot-storm"} {
		b, err := os.ReadFile("../../examples/traces/" + name + ".yaml")
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("apiVersion: capstan.dev/v1alpha1\nkind: Trace\nspec: {duration: 1h, workloads: [{name: a, cpu: 1, memory: 1Gi, daily: {min: 5, max: 1, peakAt: 1h}}]}\n"))
	f.Add([]byte("{}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := trace.Read(bytes.NewReader(b))
		if err != nil {
			return
		}
		if tr.StepOrDefault() <= 0 {
			t.Fatalf("read with step %s", tr.StepOrDefault())
		}
		for _, d := range tr.Deployments() {
			for _, q := range []string{d.CPU, d.Memory} {
				if _, err := resource.ParseQuantity(q); err != nil {
					t.Fatalf("workload %s read with request %q: %v", d.Name, q, err)
				}
			}
			for i := range time.Duration(51) {
				at := tr.Spec.Duration.Duration / 50 * i
				if n := d.Replicas(at); n < 0 {
					t.Fatalf("workload %s has %d replicas at %s", d.Name, n, at)
				}
			}
		}
	})
}
