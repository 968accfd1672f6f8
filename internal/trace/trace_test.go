package trace_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"capstan.dev/capstan/internal/trace"
)

func read(t *testing.T, body string) (*trace.Trace, error) {
	t.Helper()
	return trace.Read(strings.NewReader("apiVersion: capstan.dev/v1alpha1\nkind: Trace\n" + body))
}

// Steps hold their count until the next; a daily curve runs from min at the trough to max at its
// peak hour.
func TestCounts(t *testing.T) {
	tr, err := read(t, `spec:
  duration: 24h
  workloads:
    - {name: steps, cpu: 500m, memory: 1Gi, steps: [{at: 10m, count: 5}, {at: 1h, count: 2}]}
    - {name: daily, cpu: "1", memory: 1Gi, daily: {min: 10, max: 110, peakAt: 14h}}
`)
	if err != nil {
		t.Fatal(err)
	}
	deps := tr.Deployments()
	for _, tc := range []struct {
		dep  int
		at   time.Duration
		want int
	}{
		{0, 0, 0}, {0, 10 * time.Minute, 5}, {0, 59 * time.Minute, 5}, {0, time.Hour, 2}, {0, 20 * time.Hour, 2},
		{1, 14 * time.Hour, 110}, {1, 2 * time.Hour, 10}, {1, 8 * time.Hour, 60}, {1, 38 * time.Hour, 110},
	} {
		if got := deps[tc.dep].Replicas(tc.at); got != tc.want {
			t.Errorf("%s at %s: %d, want %d", deps[tc.dep].Name, tc.at, got, tc.want)
		}
	}
	if tr.StepOrDefault() != time.Minute {
		t.Errorf("default step %s, want 1m", tr.StepOrDefault())
	}
}

// A trace that cannot be played is refused with the field and the value named.
func TestBadTracesAreRefused(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{"spec: {duration: 1h, workloads: [{name: a, cpu: 1, memory: 1Gi, steps: [{at: 0s, count: 1}]}], extra: 1}", `unknown field "extra"`},
		{"spec: {duration: 0s, workloads: [{name: a, cpu: 1, memory: 1Gi, steps: [{at: 0s, count: 1}]}]}", "spec.duration: 0s"},
		{"spec: {duration: 1h, workloads: []}", "spec.workloads"},
		{"spec: {duration: 1h, workloads: [{name: a, cpu: lots, memory: 1Gi, steps: [{at: 0s, count: 1}]}]}", `spec.workloads[0].cpu: "lots"`},
		{"spec: {duration: 1h, workloads: [{name: a, cpu: 1, memory: 1Gi}]}", "give steps or daily"},
		{"spec: {duration: 1h, workloads: [{name: a, cpu: 1, memory: 1Gi, steps: [{at: 1h, count: 1}, {at: 1m, count: 2}]}]}", "spec.workloads[0].steps[1]"},
		{"spec: {duration: 1h, workloads: [{name: a, cpu: 1, memory: 1Gi, daily: {min: 5, max: 1, peakAt: 1h}}]}", "spec.workloads[0].daily: min 5, max 1"},
		{"spec: {duration: 1h, workloads: [{name: a, cpu: 1, memory: 1Gi, steps: [{at: 0s, count: 1}]}], interruptions: [{at: 1m, fraction: 2}]}", "spec.interruptions[0]"},
	} {
		if _, err := read(t, tc.body); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.body, err, tc.want)
		}
	}
	if _, err := trace.Read(strings.NewReader("apiVersion: capstan.dev/v2\nkind: Trace\n")); err == nil || !strings.Contains(err.Error(), `apiVersion "capstan.dev/v2"`) {
		t.Errorf("a newer version: %v", err)
	}
}

// The example traces are valid.
func TestExamplesRead(t *testing.T) {
	files, err := filepath.Glob("../../examples/traces/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("example traces: %v, %v", files, err)
	}
	for _, f := range files {
		in, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := trace.Read(in); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		in.Close()
	}
}
