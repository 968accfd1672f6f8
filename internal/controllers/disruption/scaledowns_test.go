package disruption

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
)

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
	d := disruptionplan.Decide(snap, disruptionplan.Options{})
	if d.Command != nil || !strings.Contains(d.Settling, "ReplicaSet "+f.ns+"/api shrank") {
		t.Fatalf("command %v, settling %q; want consolidation to wait for the scale-down", d.Command, d.Settling)
	}
	f.clk.Step(31 * time.Second)
	snap, err = f.ctrl.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := disruptionplan.Decide(snap, disruptionplan.Options{}); d.Command == nil || d.Command.Reason != karpv1.DisruptionReasonUnderutilized {
		t.Fatalf("after the wait: command %v, settling %q; want the light node consolidated", d.Command, d.Settling)
	}
}
