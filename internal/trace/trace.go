// Package trace reads workload traces — Deployments whose replica counts follow steps or a daily
// curve, and spot interruptions at given times — in a versioned YAML format (docs/replay.md,
// docs/trace.schema.json), for `kubectl capstan replay`.
package trace

import (
	"errors"
	"fmt"
	"io"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"capstan.dev/capstan/internal/replay"
	"capstan.dev/capstan/internal/versioned"
)

// The file's type; a reader refuses other kinds and versions.
const (
	APIVersion = "capstan.dev/v1alpha1"
	Kind       = "Trace"
)

// Trace is a workload played on a simulated clock.
type Trace struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       Spec              `json:"spec"`
}

// Spec is what happens, and for how long.
type Spec struct {
	// Duration is how long the trace plays.
	Duration metav1.Duration `json:"duration"`
	// Step is the simulated time between steps (default 1m).
	Step *metav1.Duration `json:"step,omitempty"`
	// Workloads are the Deployments.
	Workloads []Workload `json:"workloads"`
	// Interruptions reclaim spot machines at given times.
	Interruptions []Interruption `json:"interruptions,omitempty"`
}

// Workload is a Deployment of identical pods; its count follows Steps or Daily (one of them).
type Workload struct {
	Name   string `json:"name"`
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	// Steps set the count from each offset on (the first at 0s unless the count starts at 0).
	Steps []Step `json:"steps,omitempty"`
	// Daily is a count following the day: Min at the trough, Max at PeakAt, a cosine between.
	Daily *Daily `json:"daily,omitempty"`
}

// Step is a count from an offset on.
type Step struct {
	At    metav1.Duration `json:"at"`
	Count int             `json:"count"`
}

// Daily is a daily curve.
type Daily struct {
	Min    int             `json:"min"`
	Max    int             `json:"max"`
	PeakAt metav1.Duration `json:"peakAt"`
}

// Interruption reclaims a fraction of the spot machines at an offset.
type Interruption struct {
	At       metav1.Duration `json:"at"`
	Fraction float64         `json:"fraction"`
}

// Read reads a trace, refusing unknown fields, other kinds and versions, and bad values, with the
// field and the value named.
func Read(in io.Reader) (*Trace, error) {
	t := &Trace{}
	if err := versioned.Read(in, APIVersion, Kind, "trace", t); err != nil {
		return nil, err
	}
	return t, t.validate()
}

func (t *Trace) validate() error {
	var errs []error
	bad := func(field string, v any, why string) { errs = append(errs, fmt.Errorf("%s: %v: %s", field, v, why)) }
	if t.Spec.Duration.Duration <= 0 {
		bad("spec.duration", t.Spec.Duration.Duration, "must be positive")
	}
	if s := t.Spec.Step; s != nil && (s.Duration <= 0 || s.Duration > time.Hour) {
		bad("spec.step", s.Duration, "must be positive and at most 1h")
	}
	if len(t.Spec.Workloads) == 0 {
		bad("spec.workloads", "[]", "a trace needs at least one workload")
	}
	names := map[string]bool{}
	for i, w := range t.Spec.Workloads {
		f := fmt.Sprintf("spec.workloads[%d]", i)
		if w.Name == "" || names[w.Name] {
			bad(f+".name", fmt.Sprintf("%q", w.Name), "must be set and unique")
		}
		names[w.Name] = true
		for _, q := range []struct{ field, v string }{{"cpu", w.CPU}, {"memory", w.Memory}} {
			if v, err := resource.ParseQuantity(q.v); err != nil || v.Sign() <= 0 {
				bad(f+"."+q.field, fmt.Sprintf("%q", q.v), "must be a positive quantity")
			}
		}
		switch {
		case (len(w.Steps) > 0) == (w.Daily != nil):
			bad(f, w.Name, "give steps or daily, one of them")
		case w.Daily != nil && (w.Daily.Min < 0 || w.Daily.Max < w.Daily.Min):
			bad(f+".daily", fmt.Sprintf("min %d, max %d", w.Daily.Min, w.Daily.Max), "want 0 <= min <= max")
		}
		for j, s := range w.Steps {
			if s.Count < 0 || s.At.Duration < 0 || j > 0 && s.At.Duration <= w.Steps[j-1].At.Duration {
				bad(fmt.Sprintf("%s.steps[%d]", f, j), fmt.Sprintf("at %s, count %d", s.At.Duration, s.Count), "counts are >= 0, offsets rise")
			}
		}
	}
	for i, in := range t.Spec.Interruptions {
		if in.Fraction <= 0 || in.Fraction > 1 || in.At.Duration < 0 {
			bad(fmt.Sprintf("spec.interruptions[%d]", i), fmt.Sprintf("at %s, fraction %v", in.At.Duration, in.Fraction), "want a fraction in (0, 1] at an offset >= 0")
		}
	}
	return errors.Join(errs...)
}

// StepOrDefault is the trace's step (default one minute).
func (t *Trace) StepOrDefault() time.Duration {
	if t.Spec.Step != nil {
		return t.Spec.Step.Duration
	}
	return time.Minute
}

// Deployments are the workloads as the replay plays them.
func (t *Trace) Deployments() []replay.Deployment {
	out := make([]replay.Deployment, 0, len(t.Spec.Workloads))
	for _, w := range t.Spec.Workloads {
		out = append(out, replay.Deployment{Name: w.Name, CPU: w.CPU, Memory: w.Memory, Replicas: w.count})
	}
	return out
}

// count is the workload's replica count at an offset.
func (w Workload) count(at time.Duration) int {
	if d := w.Daily; d != nil {
		phase := 2 * math.Pi * (at - d.PeakAt.Duration).Hours() / 24
		return d.Min + int(math.Round(float64(d.Max-d.Min)*(1+math.Cos(phase))/2))
	}
	n := 0
	for _, s := range w.Steps {
		if s.At.Duration > at {
			break
		}
		n = s.Count
	}
	return n
}
