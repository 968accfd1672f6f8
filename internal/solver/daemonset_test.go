package solver_test

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// relabel returns a copy of a fake type with another name and extra or replaced labels.
func relabel(it *cloudprovider.InstanceType, name string, labels map[string]string) *cloudprovider.InstanceType {
	l := it.Requirements.Labels()
	delete(l, karpv1.ZoneLabelKey)
	delete(l, karpv1.CapacityTypeLabelKey)
	delete(l, karpv1.InstanceTypeLabelKey)
	maps.Copy(l, labels)
	return cloudprovider.NewInstanceType(name, l, it.Capacity, it.Overhead, it.Offerings)
}

func hostPortPod(port int32) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: port, HostPort: port, Protocol: corev1.ProtocolTCP}}
	}
}

// A DaemonSet that selects GPU machines adds its overhead only to GPU types: a pod that fits a
// plain type with the general DaemonSets is not pushed onto a larger machine.
func TestDaemonSetOverheadAppliesOnlyToTheTypesItRunsOn(t *testing.T) {
	fake := workload.FakeInstanceTypes(8)
	its := []*cloudprovider.InstanceType{
		fake[3], // 4 CPU, 3.9 allocatable
		relabel(fake[3], "gpu-4", map[string]string{"karpenter.k8s.aws/instance-gpu-count": "1"}),
		fake[7],
	}
	gpuAgent := workload.Pod("gpu-agent", "3", "1Gi", nil)
	gpuAgent.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "karpenter.k8s.aws/instance-gpu-count", Operator: corev1.NodeSelectorOpExists}}}}}}}
	logs := workload.Pod("logs", "100m", "128Mi", nil)
	r := solve(t, solver.Input{Pods: pods(1, "web", "3500m", "1Gi", nil), NodePools: []solver.NodePool{poolOf(its)},
		DaemonSetPods: []*corev1.Pod{gpuAgent, logs}}, solver.Options{})
	wantAllPlaced(t, r)
	nc := r.NodeClaims[0]
	if got := nc.InstanceTypes[0].Name; got != "fake-it-3" {
		t.Fatalf("cheapest candidate %s, want fake-it-3 (3.9 CPU holds 3.5 + the 100m logs agent)", got)
	}
	for _, it := range nc.InstanceTypes {
		if it.Name == "gpu-4" {
			t.Fatal("gpu-4 is a candidate although its GPU agent leaves 0.8 CPU")
		}
	}
	// The claim asks for the pod plus the overhead every candidate carries.
	if cpu := nc.Requests[corev1.ResourceCPU]; cpu.MilliValue() != 3600 {
		t.Fatalf("claim requests cpu %s, want 3600m", cpu.String())
	}
}

// A pod's host port collides with a DaemonSet's only on the types that DaemonSet runs on.
func TestDaemonSetHostPortsCollideOnlyWhereTheyRun(t *testing.T) {
	fake := workload.FakeInstanceTypes(4)
	its := []*cloudprovider.InstanceType{
		relabel(fake[1], "arm-2", map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64}),
		fake[2],
	}
	// arm-2 is cheaper than fake-it-2 (2 CPU vs 3); the exporter runs only on arm64.
	exporter := workload.Pod("exporter", "10m", "16Mi", nil)
	exporter.Spec.NodeSelector = map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64}
	hostPortPod(9100)(exporter)
	r := solve(t, solver.Input{Pods: pods(1, "scraper", "500m", "256Mi", hostPortPod(9100)), NodePools: []solver.NodePool{poolOf(its)},
		DaemonSetPods: []*corev1.Pod{exporter}}, solver.Options{})
	wantAllPlaced(t, r)
	for _, it := range r.NodeClaims[0].InstanceTypes {
		if it.Name == "arm-2" {
			t.Fatal("arm-2 is a candidate although the exporter DaemonSet holds host port 9100 there")
		}
	}
	// Without the port, the cheaper arm64 type is first.
	r = solve(t, solver.Input{Pods: pods(1, "web", "500m", "256Mi", nil), NodePools: []solver.NodePool{poolOf(its)},
		DaemonSetPods: []*corev1.Pod{exporter}}, solver.Options{})
	if got := r.NodeClaims[0].InstanceTypes[0].Name; got != "arm-2" {
		t.Fatalf("cheapest candidate %s, want arm-2", got)
	}
	// Every type runs an exporter on 9100: the pod cannot go on a new machine, and says why.
	everywhere := workload.Pod("exporter-all", "10m", "16Mi", nil)
	hostPortPod(9100)(everywhere)
	r = solve(t, solver.Input{Pods: pods(1, "scraper", "500m", "256Mi", hostPortPod(9100)), NodePools: []solver.NodePool{poolOf(its)},
		DaemonSetPods: []*corev1.Pod{everywhere}}, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "host port") {
		t.Fatalf("want the pod unschedulable for its host port, got %+v", r.Unschedulable)
	}
}
