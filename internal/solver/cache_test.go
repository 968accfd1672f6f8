package solver_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// planOf renders a plan: each claim's pool, price, candidate types and pods; each binding; each
// unplaced pod.
func planOf(r *solver.Result) string {
	var b strings.Builder
	for _, nc := range r.NodeClaims {
		fmt.Fprintf(&b, "claim %s %.4f", nc.NodePool, nc.Price)
		for _, it := range nc.InstanceTypes {
			b.WriteString(" " + it.Name)
		}
		for _, p := range nc.Pods {
			b.WriteString(" " + p.Name)
		}
		b.WriteString("\n")
	}
	for _, bd := range r.Bindings {
		fmt.Fprintf(&b, "bind %s %s\n", bd.Pod.Name, bd.Node)
	}
	for _, u := range r.Unschedulable {
		fmt.Fprintf(&b, "unplaced %s\n", u.Pod.Name)
	}
	return b.String()
}

// TestACacheChangesNoPlan plays what the disruption core does within one decision — many solves
// over the same pools and nodes, each without some nodes and with their pods to place, some
// with a pool narrowed to fewer types — through one Cache, and checks every plan against a
// solve without it. A later solve brings a resource no earlier one knew (a pending pod's FPGA),
// which grows the cache's resource index.
func TestACacheChangesNoPlan(t *testing.T) {
	fpga := corev1.ResourceName("example.com/fpga")
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 11))
		base := randomInput(r)
		// Existing nodes with pods on them, their requests summed once, as the core does.
		for i := range 3 + r.IntN(4) {
			var ps []*corev1.Pod
			for j := range r.IntN(6) {
				ps = append(ps, workload.Pod(fmt.Sprintf("on-%d-%d", i, j), "500m", "512Mi", map[string]string{"app": fmt.Sprintf("app-%d", r.IntN(4))}))
			}
			name := fmt.Sprintf("busy-%d", i)
			base.Nodes = append(base.Nodes, solver.ExistingNode{Name: name, Pods: ps, Requested: solver.Requests(ps),
				Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelTopologyZone: fmt.Sprintf("test-zone-%d", 1+i%3), "kubernetes.io/arch": "amd64"},
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("16Gi"),
					corev1.ResourcePods: resource.MustParse("30")}})
		}
		narrowed := slices.Clone(base.NodePools)
		narrowed[0].InstanceTypes = slices.DeleteFunc(slices.Clone(narrowed[0].InstanceTypes), func(it *cloudprovider.InstanceType) bool {
			return it.Capacity.Cpu().Value() < 8
		})
		withFPGA := workload.Pod("wants-fpga", "1", "1Gi", nil)
		withFPGA.Spec.Containers[0].Resources.Requests[fpga] = resource.MustParse("1")

		cache := solver.NewCache()
		for step := range 8 {
			in := base
			// Without node step-1 (its pods move), and from step 4 on with the FPGA pod.
			if k := step - 1; k >= 0 && k < len(base.Nodes) {
				in.Nodes = slices.Delete(slices.Clone(base.Nodes), k, k+1)
				in.Pods = append(slices.Clone(base.Pods), base.Nodes[k].Pods...)
			}
			if step >= 4 {
				in.Pods = append(slices.Clone(in.Pods), withFPGA)
			}
			if step%3 == 2 {
				in.NodePools = narrowed
			}
			want := planOf(solver.Solve(in, solver.Options{}))
			if got := planOf(solver.Solve(in, solver.Options{Cache: cache})); got != want {
				t.Fatalf("seed %d, solve %d: with the cache the plan is\n%s\nwithout it\n%s", seed, step, got, want)
			}
		}
	}
}

// TestAnOvercommittedResourceTakesPodsThatDoNotRequestIt: a node whose pods hold more of a
// device than it now advertises (its plugin restarted with fewer) still takes a pod that asks
// for no device, as the kube-scheduler counts.
func TestAnOvercommittedResourceTakesPodsThatDoNotRequestIt(t *testing.T) {
	fpga := corev1.ResourceName("example.com/fpga")
	holder := workload.Pod("holder", "1", "1Gi", nil)
	holder.Spec.Containers[0].Resources.Requests[fpga] = resource.MustParse("2")
	node := solver.ExistingNode{Name: "node-a", Pods: []*corev1.Pod{holder}, Requested: solver.Requests([]*corev1.Pod{holder}),
		Labels: map[string]string{corev1.LabelHostname: "node-a"},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"),
			corev1.ResourcePods: resource.MustParse("20"), fpga: resource.MustParse("1")}}
	res := solver.Solve(solver.Input{Pods: []*corev1.Pod{workload.Pod("web", "1", "1Gi", nil)}, Nodes: []solver.ExistingNode{node}}, solver.Options{})
	if len(res.Bindings) != 1 || res.Bindings[0].Node != "node-a" {
		t.Fatalf("want the pod bound to node-a, got\n%s", planOf(res))
	}
}
