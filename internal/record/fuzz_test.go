package record_test

import (
	"context"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/record"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/snapshot"
)

// FuzzRead feeds any file to what `kubectl capstan explain|simulate --recording` does with it:
// the file is refused, or it is read, served as the cluster with its cloud provider, and one
// round of the decision core runs on it; whatever that round disrupts or explains is a node of
// the recording.
func FuzzRead(f *testing.F) {
	_, good := recordFrom(f, source(f), false)
	_, anonymized := recordFrom(f, source(f), true)
	f.Add(good)
	f.Add(anonymized)
	f.Add(strings.Replace(good, `"500m"`, `"1e3"`, 1))
	f.Add(`{"apiVersion": "` + record.APIVersion + `", "kind": "` + record.Kind + `"}`)
	f.Add("apiVersion: " + record.APIVersion + "\nkind: " + record.Kind + "\nnodeClaims: [{metadata: {name: a}}]\n")
	s, err := scheme.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, file string) {
		r, err := record.Read(strings.NewReader(file))
		if err != nil {
			return
		}
		cloud, err := r.Cloud()
		if err != nil {
			return
		}
		snap, err := snapshot.Read(context.Background(), r.Reader(s), cloud, snapshot.Options{Now: r.RecordedAt.Time})
		if err != nil {
			return
		}
		recorded := map[string]bool{}
		for _, nc := range r.NodeClaims {
			recorded[nc.Name] = true
		}
		d := disruptionplan.Decide(snap, disruptionplan.Options{})
		if d.Command != nil {
			for _, c := range d.Command.Candidates {
				if !recorded[c.NodeClaim.Name] {
					t.Fatalf("the round disrupts NodeClaim %q, which the recording does not hold", c.NodeClaim.Name)
				}
			}
		}
		for _, e := range d.Explanations {
			if e.Node.NodeClaim != nil && !recorded[e.Node.NodeClaim.Name] {
				t.Fatalf("the round explains NodeClaim %q, which the recording does not hold", e.Node.NodeClaim.Name)
			}
		}
	})
}
