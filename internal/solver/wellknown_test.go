package solver_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

const gpuCount = "karpenter.k8s.aws/instance-gpu-count"

func requireExpr(exprs ...corev1.NodeSelectorRequirement) func(*corev1.Pod) {
	return nodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: exprs})
}

// gpuAndPlain are two cheap plain types and a dearer one carrying the GPU label.
func gpuAndPlain() []*cloudprovider.InstanceType {
	fake := workload.FakeInstanceTypes(6)
	return []*cloudprovider.InstanceType{fake[1], fake[2], relabel(fake[5], "gpu-6", map[string]string{gpuCount: "1"})}
}

func onlyType(t *testing.T, r *solver.Result, want string) {
	t.Helper()
	wantAllPlaced(t, r)
	for _, nc := range r.NodeClaims {
		for _, it := range nc.InstanceTypes {
			if it.Name != want {
				t.Fatalf("candidate %s, want only %s", it.Name, want)
			}
		}
	}
}

// A provider label a type does not carry is absent on its machines: a pod (or a pool) that needs
// the label gets only the types that have it, and one that forbids it gets the others.
func TestProviderLabelsAbsentFromATypeAreAbsentFromItsMachines(t *testing.T) {
	its := gpuAndPlain()
	in := solver.Input{Pods: pods(1, "cuda", "500m", "1Gi", requireExpr(corev1.NodeSelectorRequirement{Key: gpuCount, Operator: corev1.NodeSelectorOpExists})),
		NodePools: []solver.NodePool{poolOf(its)}}
	onlyType(t, solve(t, in, solver.Options{}), "gpu-6")

	in.Pods = pods(1, "cuda-one", "500m", "1Gi", requireExpr(corev1.NodeSelectorRequirement{Key: gpuCount, Operator: corev1.NodeSelectorOpGt, Values: []string{"0"}}))
	onlyType(t, solve(t, in, solver.Options{}), "gpu-6")

	in.Pods = pods(1, "cpu-only", "500m", "1Gi", requireExpr(corev1.NodeSelectorRequirement{Key: gpuCount, Operator: corev1.NodeSelectorOpDoesNotExist}))
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	for _, it := range r.NodeClaims[0].InstanceTypes {
		if it.Name == "gpu-6" {
			t.Fatal("a pod forbidding the GPU label may launch on the GPU type")
		}
	}

	gpuPool := poolOf(its)
	gpuPool.Requirements.Add(requirements.MustNew(gpuCount, requirements.Exists))
	onlyType(t, solve(t, solver.Input{Pods: pods(2, "any", "500m", "1Gi", nil), NodePools: []solver.NodePool{gpuPool}}, solver.Options{}), "gpu-6")
}

// The keys a provider registers may be required without a pool setting them; others may not.
func TestProviderRegisteredLabelKeys(t *testing.T) {
	fake := workload.FakeInstanceTypes(4)
	its := []*cloudprovider.InstanceType{relabel(fake[1], "fast-2", map[string]string{"example.com/disk": "nvme"}), fake[2]}
	podNeeds := func() []*corev1.Pod {
		return pods(1, "db", "500m", "1Gi", requireExpr(corev1.NodeSelectorRequirement{Key: "example.com/disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"nvme"}}))
	}
	r := solve(t, solver.Input{Pods: podNeeds(), NodePools: []solver.NodePool{poolOf(its)}, WellKnownLabels: []string{"example.com/disk"}}, solver.Options{})
	onlyType(t, r, "fast-2")

	r = solve(t, solver.Input{Pods: podNeeds(), NodePools: []solver.NodePool{poolOf(its)}, WellKnownLabels: []string{}}, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, `label "example.com/disk" is not set`) {
		t.Fatalf("an unregistered key no pool sets was satisfied: %+v", r.Unschedulable)
	}
}
