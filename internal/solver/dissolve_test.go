package solver_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// Karpenter's diverse benchmark workload (a fifth of its pods with hostname anti-affinity to
// each other, so one machine each) is bought exactly one machine per anti-affinity pod: the
// pods the packing leaves over once every claim has reached its target size go into grown
// claims, not onto machines of their own, and the plan costs no more for it.
func TestDiverseWorkloadBuysOneMachinePerAntiAffinityPod(t *testing.T) {
	its := workload.FakeInstanceTypes(400)
	for _, tc := range []struct {
		n     int
		limit string
	}{{1000, ""}, {5000, ""}, {1000, "100000"}} {
		n := tc.n
		ps := workload.DiversePods(n, 42)
		anti := 0
		for _, p := range ps {
			if p.Labels["app"] == "nginx" {
				anti++
			}
		}
		np := workload.UnlimitedPool("default", its)
		if tc.limit != "" {
			// A limit far above the need: the claims reserve against it, and dissolving one
			// gives its reservation back.
			np.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(tc.limit)}
		}
		in := solver.Input{Pods: ps, NodePools: []solver.NodePool{np}, WellKnownLabels: workload.WellKnownLabels(its)}
		var r *solver.Result
		if n <= 1000 {
			r = solve(t, in, solver.Options{})
		} else {
			// The verifier's topology checks are quadratic in pods: 1,000 are checked.
			r = solver.Solve(in, solver.Options{})
		}
		wantAllPlaced(t, r)
		if len(r.NodeClaims) != anti {
			t.Errorf("%d pods, cpu limit %q: %d claims, want %d (one per anti-affinity pod)", n, tc.limit, len(r.NodeClaims), anti)
		}
	}
}

// A pod that a hostname spread constraint selects is not planned onto a machine where the
// spread pod would then see more than maxSkew matching pods (the kube-scheduler checks the
// spread only when it binds the spread pod, so the other pod binding first would turn it away):
// neither by the packing, when the spread pod was placed first, nor when a leftover claim is
// dissolved into grown ones. A pod the spread does not select joins a grown claim instead of a
// machine of its own.
func TestPodsSelectedByAHostnameSpreadKeepItWithinMaxSkew(t *testing.T) {
	selectRoleX := func(c *corev1.TopologySpreadConstraint) {
		c.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"role": "x"}}
	}
	spreadX := func(p *corev1.Pod) {
		p.Labels["role"] = "x"
		spread(corev1.LabelHostname, 1, corev1.DoNotSchedule, "", selectRoleX)(p)
	}
	for _, tc := range []struct {
		name string
		// otherCPU decides whether the other pod fits a claim's target size after the spread pod
		// (500m: the packing would place it there) or is left over (1500m: a dissolving would).
		otherCPU, otherRole string
		wantClaims          int
	}{
		{"selected, packed", "500m", "x", 4},
		{"selected, left over", "1500m", "x", 4},
		{"not selected", "1500m", "y", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			anchors := pods(3, "anchor", "2", "1Gi", antiAffinity(corev1.LabelHostname, "anchor"))
			spread := pods(3, "spread", "500m", "1Gi", spreadX)
			other := pods(1, "other", tc.otherCPU, "1Gi", func(p *corev1.Pod) { p.Labels["role"] = tc.otherRole })
			in := solver.Input{Pods: append(append(anchors, spread...), other...),
				NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(16))}}
			r := solve(t, in, solver.Options{})
			wantAllPlaced(t, r)
			for _, nc := range r.NodeClaims {
				spreads, matching := 0, 0
				for _, p := range nc.Pods {
					if len(p.Spec.TopologySpreadConstraints) > 0 {
						spreads++
					}
					if p.Labels["role"] == "x" {
						matching++
					}
				}
				if spreads > 0 && matching > 1 {
					t.Errorf("a claim holds %d pods role=x next to a hostname spread of maxSkew 1: %v", matching, podNames(nc))
				}
			}
			if len(r.NodeClaims) != tc.wantClaims {
				t.Errorf("%d claims, want %d: %v", len(r.NodeClaims), tc.wantClaims, claimPods(r))
			}
		})
	}
}

// A leftover pod that other pods' hostname anti-affinity selects is not moved next to them.
func TestDissolvingKeepsAntiAffinityOfOthers(t *testing.T) {
	anchors := pods(3, "anchor", "2", "1Gi", antiAffinity(corev1.LabelHostname, "anchor"))
	// Labelled like the anchors, without their term: only the anchors' anti-affinity keeps it away.
	leftover := pods(1, "leftover", "500m", "1Gi", func(p *corev1.Pod) { p.Labels["app"] = "anchor" })
	fill := pods(3, "fill", "500m", "1Gi", nil)
	in := solver.Input{Pods: append(append(anchors, fill...), leftover...), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(16))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	for _, nc := range r.NodeClaims {
		if n := len(nc.Pods); n > 1 && containsPod(nc, "leftover-0") {
			for _, p := range nc.Pods {
				if p.Name != "leftover-0" && p.Labels["app"] == "anchor" {
					t.Fatalf("leftover-0 shares a claim with %s against its hostname anti-affinity", p.Name)
				}
			}
		}
	}
}

func podNames(nc *solver.PlannedNodeClaim) []string {
	var out []string
	for _, p := range nc.Pods {
		out = append(out, p.Name)
	}
	return out
}

func claimPods(r *solver.Result) [][]string {
	var out [][]string
	for _, nc := range r.NodeClaims {
		out = append(out, podNames(nc))
	}
	return out
}

func containsPod(nc *solver.PlannedNodeClaim, name string) bool {
	for _, p := range nc.Pods {
		if p.Name == name {
			return true
		}
	}
	return false
}
