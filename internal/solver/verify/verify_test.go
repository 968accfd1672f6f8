package verify

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// Each case is a plan that breaks one rule; the verifier must name it.
func TestVerifierCatchesViolations(t *testing.T) {
	its := workload.FakeInstanceTypes(4) // 1..4 CPU
	pool := solver.NodePool{Name: "p", InstanceTypes: its}
	zoneReq := func(z string) requirements.Requirements {
		var r requirements.Requirements
		r.Add(requirements.Single(corev1.LabelTopologyZone, z))
		return r
	}
	claim := func(reqs requirements.Requirements, pods ...*corev1.Pod) *solver.PlannedNodeClaim {
		return &solver.PlannedNodeClaim{NodePool: "p", Requirements: reqs, InstanceTypes: its[:1], Pods: pods}
	}
	anti := func(p *corev1.Pod, key string) *corev1.Pod {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: key, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}}}}
		return p
	}
	small := func(name string) *corev1.Pod {
		return workload.Pod(name, "100m", "100Mi", map[string]string{"app": "a"})
	}
	hostSpread := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}}
		return p
	}

	tests := []struct {
		name string
		in   solver.Input
		res  solver.Result
		want string
	}{
		{
			name: "pod missing from the plan",
			in:   solver.Input{Pods: []*corev1.Pod{small("a"), small("b")}, NodePools: []solver.NodePool{pool}},
			res:  solver.Result{NodeClaims: []*solver.PlannedNodeClaim{claim(requirements.Requirements{}, small("a"))}},
			want: "default/b appears 0 times",
		},
		{
			name: "pods exceed the smallest candidate",
			in:   solver.Input{Pods: []*corev1.Pod{workload.Pod("big", "2", "1Gi", nil)}, NodePools: []solver.NodePool{pool}},
			res:  solver.Result{NodeClaims: []*solver.PlannedNodeClaim{claim(requirements.Requirements{}, workload.Pod("big", "2", "1Gi", nil))}},
			want: "allocatable is",
		},
		{
			name: "node selector not met by every launch option",
			in: solver.Input{Pods: []*corev1.Pod{func() *corev1.Pod {
				p := small("z")
				p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "test-zone-1"}
				return p
			}()}, NodePools: []solver.NodePool{pool}},
			res: solver.Result{NodeClaims: []*solver.PlannedNodeClaim{claim(requirements.Requirements{}, func() *corev1.Pod {
				p := small("z")
				p.Spec.NodeSelector = map[string]string{corev1.LabelTopologyZone: "test-zone-1"}
				return p
			}())}},
			want: "node affinity does not match",
		},
		{
			name: "hostname anti-affinity broken",
			in:   solver.Input{Pods: []*corev1.Pod{anti(small("a"), corev1.LabelHostname), anti(small("b"), corev1.LabelHostname)}, NodePools: []solver.NodePool{pool}},
			res: solver.Result{NodeClaims: []*solver.PlannedNodeClaim{claim(requirements.Requirements{},
				anti(small("a"), corev1.LabelHostname), anti(small("b"), corev1.LabelHostname))}},
			want: "required anti-affinity",
		},
		{
			name: "zone anti-affinity broken across claims",
			in:   solver.Input{Pods: []*corev1.Pod{anti(small("a"), corev1.LabelTopologyZone), anti(small("b"), corev1.LabelTopologyZone)}, NodePools: []solver.NodePool{pool}},
			res: solver.Result{NodeClaims: []*solver.PlannedNodeClaim{
				claim(zoneReq("test-zone-1"), anti(small("a"), corev1.LabelTopologyZone)),
				claim(zoneReq("test-zone-1"), anti(small("b"), corev1.LabelTopologyZone))}},
			want: "required anti-affinity",
		},
		{
			name: "taint not tolerated",
			in: solver.Input{Pods: []*corev1.Pod{small("a")}, NodePools: []solver.NodePool{{Name: "p", InstanceTypes: its,
				Taints: []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}}}},
			res:  solver.Result{NodeClaims: []*solver.PlannedNodeClaim{claim(requirements.Requirements{}, small("a"))}},
			want: "does not tolerate taint k",
		},
		{
			name: "limits exceeded",
			in: solver.Input{Pods: []*corev1.Pod{small("a"), small("b")}, NodePools: []solver.NodePool{{Name: "p", InstanceTypes: its,
				Remaining: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}},
			res: solver.Result{NodeClaims: []*solver.PlannedNodeClaim{
				claim(requirements.Requirements{}, small("a")), claim(requirements.Requirements{}, small("b"))}},
			want: "only 1 left",
		},
		{
			// The other pod lacks the constraint: if it binds first the spread pod is turned away.
			name: "hostname spread exceeded by a pod it selects",
			in:   solver.Input{Pods: []*corev1.Pod{hostSpread(small("s")), small("o")}, NodePools: []solver.NodePool{pool}},
			res: solver.Result{NodeClaims: []*solver.PlannedNodeClaim{
				claim(requirements.Requirements{}, hostSpread(small("s")), small("o"))}},
			want: "2 matching pods on node",
		},
		{
			name: "zone spread skew",
			in: func() solver.Input {
				var pods []*corev1.Pod
				for _, n := range []string{"a", "b", "c"} {
					p := small(n)
					p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
						WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}}}
					pods = append(pods, p)
				}
				return solver.Input{Pods: pods, NodePools: []solver.NodePool{pool}}
			}(),
			want: "skew 3 > maxSkew 1",
		},
	}
	// The spread case places all three pods in one zone.
	spread := &tests[len(tests)-1]
	spread.res = solver.Result{NodeClaims: []*solver.PlannedNodeClaim{claim(zoneReq("test-zone-1"), spread.in.Pods...)}}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			errs := Plan(tc.in, &tc.res)
			for _, err := range errs {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Fatalf("no error contains %q; got %v", tc.want, errs)
		})
	}
	// The same two pods on machines of their own are a valid plan.
	apart := solver.Result{NodeClaims: []*solver.PlannedNodeClaim{
		claim(requirements.Requirements{}, hostSpread(small("s"))), claim(requirements.Requirements{}, small("o"))}}
	if errs := Plan(solver.Input{Pods: []*corev1.Pod{hostSpread(small("s")), small("o")}, NodePools: []solver.NodePool{pool}}, &apart); len(errs) > 0 {
		t.Errorf("a hostname spread pod apart from the pod it selects: %v", errs)
	}
}
