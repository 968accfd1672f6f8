package disruption

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruption"
)

// An owner shrinks when its desired replicas fall between sightings or while it has more
// replicas than it wants; sightings within the wait extend one run; owners gone are forgotten.
func TestScaleDownsAreSeen(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	wait := 30 * time.Second
	var s scaleDowns
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
	var fresh scaleDowns
	if got := fresh.observe(t0, wait, append(web(5, 5), scalable{uid: "db", name: "StatefulSet default/db", desired: 2, current: 3})); len(got) != 1 || got[0].Owner != "StatefulSet default/db" {
		t.Fatalf("first sighting: %v, want only the StatefulSet still shrinking", got)
	}
	if got := s.observe(t0.Add(6*time.Minute), wait, nil); len(got) != 0 {
		t.Fatalf("owners gone are still remembered: %v", got)
	}
}

// The controller reads ReplicaSets and StatefulSets from the API: a ReplicaSet scaled down
// between two rounds holds consolidation of under-used nodes back for the wait, emptiness not.
func TestConsolidationWaitsForAReplicaSetScaleDown(t *testing.T) {
	f := newFixture(t, "shrink", nil)
	f.node("shrink-busy", "m5.2xlarge", "1", "1", "1", "1", "1", "1")
	f.node("shrink-light", "m5.xlarge", "1")
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: f.ns}, Spec: appsv1.ReplicaSetSpec{Replicas: new(int32(4)),
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "api"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "api"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
	if err := env.Client.Create(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ctrl.Snapshot(t.Context()); err != nil {
		t.Fatal(err)
	}
	rs.Spec.Replicas = new(int32(1))
	if err := env.Client.Update(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	snap, err := f.ctrl.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	d := disruption.Decide(snap, disruption.Options{})
	if d.Command != nil || !strings.Contains(d.Settling, "ReplicaSet "+f.ns+"/api shrank") {
		t.Fatalf("command %v, settling %q; want consolidation to wait for the scale-down", d.Command, d.Settling)
	}
	f.clk.Step(31 * time.Second)
	snap, err = f.ctrl.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := disruption.Decide(snap, disruption.Options{}); d.Command == nil || d.Command.Reason != karpv1.DisruptionReasonUnderutilized {
		t.Fatalf("after the wait: command %v, settling %q; want the light node consolidated", d.Command, d.Settling)
	}
}
