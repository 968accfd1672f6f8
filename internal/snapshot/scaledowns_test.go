package snapshot

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// An owner shrinks when its desired replicas fall between sightings or while it has more
// replicas than it wants; sightings within the wait extend one run; owners gone are forgotten.
func TestScaleDownsAreSeen(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	wait := 30 * time.Second
	var s ScaleDowns
	web := func(desired, current int32) []scalable {
		return []scalable{{uid: types.UID("web"), name: "ReplicaSet default/web", desired: desired, current: current}}
	}
	if got := s.observe(t0, wait, web(10, 10)); len(got) != 0 {
		t.Fatalf("a steady owner seen first: %v", got)
	}
	if got := s.observe(t0.Add(10*time.Second), wait, web(12, 10)); len(got) != 0 {
		t.Fatalf("an owner scaling up: %v", got)
	}
	got := s.observe(t0.Add(20*time.Second), wait, web(5, 12))
	if len(got) != 1 || got[0].Owner != "ReplicaSet default/web" || !got[0].At.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("desired 12 -> 5: %v, want one scale-down at 10:00:20", got)
	}
	// Still more replicas than wanted: the same run goes on.
	got = s.observe(t0.Add(40*time.Second), wait, web(5, 8))
	if len(got) != 1 || !got[0].At.Equal(t0.Add(40*time.Second)) || !got[0].Since.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("still shrinking: %v, want At 10:00:40 since 10:00:20", got)
	}
	// Done: remembered as it was; a later scale-down after a pause begins a new run.
	if got = s.observe(t0.Add(50*time.Second), wait, web(5, 5)); len(got) != 1 || !got[0].At.Equal(t0.Add(40*time.Second)) {
		t.Fatalf("done shrinking: %v", got)
	}
	got = s.observe(t0.Add(5*time.Minute), wait, web(3, 5))
	if len(got) != 1 || !got[0].Since.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("a new scale-down after a pause: %v, want a new run", got)
	}
	// Capstan restarted: a fresh tracker sees only owners with more replicas than they want.
	var fresh ScaleDowns
	if got := fresh.observe(t0, wait, append(web(5, 5), scalable{uid: "db", name: "StatefulSet default/db", desired: 2, current: 3})); len(got) != 1 || got[0].Owner != "StatefulSet default/db" {
		t.Fatalf("first sighting: %v, want only the StatefulSet still shrinking", got)
	}
	if got := s.observe(t0.Add(6*time.Minute), wait, nil); len(got) != 0 {
		t.Fatalf("owners gone are still remembered: %v", got)
	}
}
