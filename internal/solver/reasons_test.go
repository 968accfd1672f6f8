package solver_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// A pod that fits no NodePool gets, per NodePool, the check it failed, and the closest NodePool
// is the one it got furthest with: limits beat size, size beats a taint, a taint beats
// requirements (a pool the pod's requirements exclude is the furthest).
func TestUnschedulablePodNamesTheClosestNodePool(t *testing.T) {
	tainted := solver.NodePool{Name: "tainted", Weight: 50, InstanceTypes: workload.FakeInstanceTypes(8),
		Taints: []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}}
	arm := solver.NodePool{Name: "arm", Weight: 40, InstanceTypes: workload.FakeInstanceTypes(8),
		Requirements: requirements.FromLabels(map[string]string{karpv1.ArchLabelKey: "arm64"})}
	small := solver.NodePool{Name: "small", Weight: 30, InstanceTypes: workload.FakeInstanceTypes(2)}
	limited := solver.NodePool{Name: "limited", Weight: 20, InstanceTypes: workload.FakeInstanceTypes(8),
		Remaining: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}}
	pod := pods(1, "big", "4", "1Gi", nil)

	r := solve(t, solver.Input{Pods: pod, NodePools: []solver.NodePool{tainted, arm, small, limited}}, solver.Options{})
	if len(r.Unschedulable) != 1 {
		t.Fatalf("want the pod unschedulable, got %d claims, %d unschedulable", len(r.NodeClaims), len(r.Unschedulable))
	}
	u := r.Unschedulable[0]
	want := map[string]solver.MissStage{"tainted": solver.MissTaint, "arm": solver.MissRequirements,
		"small": solver.MissResources, "limited": solver.MissLimits}
	if len(u.Pools) != len(want) {
		t.Fatalf("per-pool misses %+v, want one per NodePool", u.Pools)
	}
	for _, m := range u.Pools {
		if m.Stage != want[m.NodePool] || m.Reason == "" {
			t.Errorf("NodePool %s: stage %s (%q), want %s with a reason", m.NodePool, m.Stage, m.Reason, want[m.NodePool])
		}
	}
	if c, ok := u.Closest(); !ok || c.NodePool != "limited" || c.Stage != solver.MissLimits {
		t.Errorf("closest %+v, want limited (limits)", c)
	}

	r = solve(t, solver.Input{Pods: pod, NodePools: []solver.NodePool{tainted, arm, small}}, solver.Options{})
	if c, ok := r.Unschedulable[0].Closest(); !ok || c.NodePool != "small" || !strings.HasPrefix(c.Reason, "no instance type has cpu 4 (the largest has cpu ") {
		t.Errorf("without the limited pool, closest %+v, want small: no type large enough", c)
	}
	r = solve(t, solver.Input{Pods: pod, NodePools: []solver.NodePool{tainted, arm}}, solver.Options{})
	if c, ok := r.Unschedulable[0].Closest(); !ok || c.NodePool != "tainted" {
		t.Errorf("with the tainted and arm pools, closest %+v, want tainted (a taint beats a requirement)", c)
	}
	// A pool whose requirements exclude the pod and whose taint it lacks is a requirements miss.
	taintedArm := arm
	taintedArm.Name, taintedArm.Taints = "tainted-arm", tainted.Taints
	r = solve(t, solver.Input{Pods: pod, NodePools: []solver.NodePool{taintedArm}}, solver.Options{})
	if u := r.Unschedulable[0]; len(u.Pools) != 1 || u.Pools[0].Stage != solver.MissRequirements {
		t.Errorf("a tainted pool the pod's requirements exclude: %+v, want a requirements miss", u.Pools)
	}
	r = solve(t, solver.Input{Pods: pod}, solver.Options{})
	if _, ok := r.Unschedulable[0].Closest(); ok || r.Unschedulable[0].Reason != "no NodePool" {
		t.Errorf("without NodePools: %+v, want no closest and reason \"no NodePool\"", r.Unschedulable[0])
	}
}
