package solver_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/verify"
	"capstan.dev/capstan/internal/solver/workload"
)

const zoneKey = corev1.LabelTopologyZone

func pods(n int, prefix, cpu, mem string, mutate func(*corev1.Pod)) []*corev1.Pod {
	var out []*corev1.Pod
	for i := range n {
		p := workload.Pod(fmt.Sprintf("%s-%d", prefix, i), cpu, mem, map[string]string{"app": prefix})
		if mutate != nil {
			mutate(p)
		}
		out = append(out, p)
	}
	return out
}

func appSelector(app string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}
}

func node(name, zone, cpu string, podsOn ...*corev1.Pod) solver.ExistingNode {
	return solver.ExistingNode{
		Name:   name,
		Labels: map[string]string{corev1.LabelHostname: name, zoneKey: zone, karpv1.ArchLabelKey: "amd64"},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("16Gi"),
			corev1.ResourcePods: resource.MustParse("110")},
		Pods: podsOn,
	}
}

func poolOf(its []*cloudprovider.InstanceType) solver.NodePool {
	return solver.NodePool{Name: "default", InstanceTypes: its}
}

// solve runs the solver and the independent verifier.
func solve(t *testing.T, in solver.Input, opts solver.Options) *solver.Result {
	t.Helper()
	r := solver.Solve(in, opts)
	for _, err := range verify.Plan(in, r) {
		t.Errorf("verifier: %v", err)
	}
	return r
}

func zoneOf(nc *solver.PlannedNodeClaim) string {
	return nc.Requirements.Labels()[zoneKey]
}

func wantAllPlaced(t *testing.T, r *solver.Result) {
	t.Helper()
	if len(r.Unschedulable) > 0 {
		t.Fatalf("%d pods unschedulable; first: %s: %s", len(r.Unschedulable), r.Unschedulable[0].Pod.Name, r.Unschedulable[0].Reason)
	}
}

func TestNodeSelectorNarrowsTheClaim(t *testing.T) {
	in := solver.Input{Pods: pods(3, "web", "500m", "1Gi", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{zoneKey: "test-zone-3"}
	}), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 1 || zoneOf(r.NodeClaims[0]) != "test-zone-3" {
		t.Fatalf("want one claim in test-zone-3, got %d claims, zone %q", len(r.NodeClaims), zoneOf(r.NodeClaims[0]))
	}
	// zone 3 has only on-demand offerings.
	if ct := r.NodeClaims[0].Requirements; ct.Labels()[karpv1.CapacityTypeLabelKey] != "" {
		if v := ct.Labels()[karpv1.CapacityTypeLabelKey]; v != karpv1.CapacityTypeOnDemand {
			t.Fatalf("capacity type %q in zone 3", v)
		}
	}
}

func TestRequiredNodeAffinityTermsAreORed(t *testing.T) {
	in := solver.Input{Pods: pods(1, "web", "500m", "1Gi", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: karpv1.ArchLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"arm64"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"test-zone-2"}}}},
			}}}}
	}), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if zoneOf(r.NodeClaims[0]) != "test-zone-2" {
		t.Fatalf("want the second term (test-zone-2) used, got %s", r.NodeClaims[0].Requirements.String())
	}
}

func TestTaintsAndTolerations(t *testing.T) {
	orders := solver.NodePool{Name: "orders", InstanceTypes: workload.FakeInstanceTypes(8),
		Taints:        []corev1.Taint{{Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}},
		StartupTaints: []corev1.Taint{{Key: "node.cilium.io/agent-not-ready", Effect: corev1.TaintEffectNoExecute}}}
	orders.Requirements.Add(requirements.Single("workload", "orders"))

	plain := pods(1, "plain", "500m", "1Gi", nil)
	r := solve(t, solver.Input{Pods: plain, NodePools: []solver.NodePool{orders}}, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "taint workload=orders:NoSchedule not tolerated") {
		t.Fatalf("want the untolerated taint as the reason, got %+v", r.Unschedulable)
	}
	tolerant := pods(2, "orders", "500m", "1Gi", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "workload", Operator: corev1.TolerationOpEqual, Value: "orders", Effect: corev1.TaintEffectNoSchedule}}
		p.Spec.NodeSelector = map[string]string{"workload": "orders"}
	})
	r = solve(t, solver.Input{Pods: tolerant, NodePools: []solver.NodePool{orders}}, solver.Options{})
	wantAllPlaced(t, r) // the startup taint is not tolerated, and need not be
}

func TestTopologySpreadAcrossZonesCountsExistingPods(t *testing.T) {
	spread := func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: appSelector("web")}}
	}
	// Zone 1 already runs two web pods, zone 2 one: three new pods must go 0/1/2 to zones 1/2/3.
	existing := []solver.ExistingNode{
		node("n1", "test-zone-1", "1", pods(2, "web", "100m", "100Mi", spread)...),
		node("n2", "test-zone-2", "1", workload.Pod("web-old", "100m", "100Mi", map[string]string{"app": "web"})),
	}
	for i := range existing[0].Pods {
		existing[0].Pods[i].Name = fmt.Sprintf("web-old1-%d", i)
	}
	in := solver.Input{Pods: pods(3, "web", "2", "1Gi", spread), Nodes: existing, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	perZone := map[string]int{}
	for _, nc := range r.NodeClaims {
		perZone[zoneOf(nc)] += len(nc.Pods)
	}
	if perZone["test-zone-1"] != 0 || perZone["test-zone-2"] != 1 || perZone["test-zone-3"] != 2 {
		t.Fatalf("new pods per zone = %v, want zone-2: 1, zone-3: 2", perZone)
	}
}

func TestTopologySpreadMinDomains(t *testing.T) {
	// Only zones 1 and 2 are allowed but minDomains is 3: the global minimum counts as 0, so each
	// zone takes at most maxSkew pods and the rest cannot be placed.
	minDomains := int32(3)
	in := solver.Input{Pods: pods(4, "web", "500m", "1Gi", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot}
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"test-zone-1", "test-zone-2"}}}}}}}}
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey, MinDomains: &minDomains,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: appSelector("web")}}
	}), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	if placed := len(in.Pods) - len(r.Unschedulable); placed != 2 {
		t.Fatalf("placed %d pods, want 2 (one per allowed zone)", placed)
	}
	if !strings.Contains(r.Unschedulable[0].Reason, "topology spread zone maxSkew 1 cannot be satisfied") {
		t.Fatalf("reason %q", r.Unschedulable[0].Reason)
	}
}

func TestHostnameSpreadAndAntiAffinity(t *testing.T) {
	spread := pods(4, "spread", "100m", "100Mi", func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: corev1.LabelHostname,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: appSelector("spread")}}
	})
	anti := pods(3, "anti", "100m", "100Mi", func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: appSelector("anti")}}}}
	})
	in := solver.Input{Pods: append(spread, anti...), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 3 {
		t.Fatalf("want 3 claims (one per anti-affinity pod, spread pods sharing them two by two), got %d", len(r.NodeClaims))
	}
}

func TestAntiAffinityOfExistingPodsIsSymmetric(t *testing.T) {
	guard := workload.Pod("guard", "100m", "100Mi", map[string]string{"app": "guard"})
	guard.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: zoneKey, LabelSelector: appSelector("web")}}}}
	in := solver.Input{
		Pods:      pods(2, "web", "100m", "100Mi", nil),
		Nodes:     []solver.ExistingNode{node("n1", "test-zone-1", "8", guard)},
		NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))},
	}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.Bindings) != 0 {
		t.Fatalf("web pods were bound next to a pod whose anti-affinity excludes them: %+v", r.Bindings)
	}
	for _, nc := range r.NodeClaims {
		if z := zoneOf(nc); z == "test-zone-1" || z == "" {
			t.Fatalf("claim in zone %q; the guard's anti-affinity excludes zone 1 and the claim must decide its zone", z)
		}
	}
}

func TestPodAffinityFollowsExistingPods(t *testing.T) {
	db := workload.Pod("db", "100m", "100Mi", map[string]string{"app": "db"})
	in := solver.Input{
		Pods: pods(2, "api", "2", "1Gi", func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: zoneKey, LabelSelector: appSelector("db")}}}}
		}),
		Nodes:     []solver.ExistingNode{node("n2", "test-zone-2", "1", db)},
		NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))},
	}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	for _, nc := range r.NodeClaims {
		if zoneOf(nc) != "test-zone-2" {
			t.Fatalf("api pods planned in %q, want test-zone-2 with the db pod", zoneOf(nc))
		}
	}
	// Without the db pod, nothing satisfies the affinity and the pods do not match it themselves.
	in.Nodes = nil
	r = solve(t, in, solver.Options{})
	if len(r.Unschedulable) != 2 || !strings.Contains(r.Unschedulable[0].Reason, "pod affinity on zone") {
		t.Fatalf("want both pods unschedulable for pod affinity, got %+v", r.Unschedulable)
	}
}

func TestPreferencesAreRelaxedLowestWeightFirst(t *testing.T) {
	// Zone 3 has no spot: both preferences cannot hold. The lighter one (zone 3) is dropped.
	prefs := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"test-zone-3"}}}}},
			{Weight: 20, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot"}}}}},
		}}}
	}
	in := solver.Input{Pods: pods(1, "web", "500m", "1Gi", prefs), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	l := r.NodeClaims[0].Requirements.Labels()
	if l[karpv1.CapacityTypeLabelKey] != "spot" || l[zoneKey] == "test-zone-3" {
		t.Fatalf("want spot outside zone 3 (weight-20 preference kept), got %s", r.NodeClaims[0].Requirements.String())
	}
	// Honoured when possible: the weight-10 preference alone is met.
	in.Pods = pods(1, "solo", "500m", "1Gi", func(p *corev1.Pod) {
		prefs(p)
		p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution = p.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution[:1]
	})
	r = solve(t, in, solver.Options{})
	if zoneOf(r.NodeClaims[0]) != "test-zone-3" {
		t.Fatalf("a satisfiable preference was not honoured: %s", r.NodeClaims[0].Requirements.String())
	}
	// Ignored on request.
	r = solve(t, in, solver.Options{IgnorePreferences: true})
	if r.NodeClaims[0].Requirements.Labels()[zoneKey] == "test-zone-3" && len(r.NodeClaims[0].Requirements.Labels()) > 0 {
		if rq, ok := r.NodeClaims[0].Requirements.Get(zoneKey); ok && rq.Len() == 1 {
			t.Fatalf("IgnorePreferences still pinned the preferred zone")
		}
	}
}

func TestDaemonSetOverheadChangesTheType(t *testing.T) {
	its := workload.FakeInstanceTypes(8)
	in := solver.Input{Pods: pods(1, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{poolOf(its)}}
	r := solve(t, in, solver.Options{})
	if got := r.NodeClaims[0].InstanceTypes[0].Name; got != "fake-it-1" {
		t.Fatalf("without daemonsets the cheapest type is %s, want fake-it-1", got)
	}
	in.DaemonSetPods = []*corev1.Pod{workload.Pod("agent", "1", "128Mi", nil)}
	r = solve(t, in, solver.Options{})
	if got := r.NodeClaims[0].InstanceTypes[0].Name; got != "fake-it-2" {
		t.Fatalf("with a 1-CPU daemonset the cheapest type is %s, want fake-it-2", got)
	}
	// A daemonset that does not tolerate the pool's taint does not run there.
	tainted := poolOf(its)
	tainted.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}}
	in.NodePools = []solver.NodePool{tainted}
	in.Pods[0].Spec.Tolerations = []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}}
	r = solve(t, in, solver.Options{})
	if got := r.NodeClaims[0].InstanceTypes[0].Name; got != "fake-it-1" {
		t.Fatalf("an intolerant daemonset was counted: %s", got)
	}
}

func TestLimitsStopThePlanMidway(t *testing.T) {
	pool := poolOf(workload.FakeInstanceTypes(16))
	pool.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
	in := solver.Input{Pods: pods(100, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{pool}}
	r := solve(t, in, solver.Options{})
	if len(r.NodeClaims) == 0 || len(r.Unschedulable) == 0 {
		t.Fatalf("want some pods placed and the rest blocked: %d claims, %d unschedulable", len(r.NodeClaims), len(r.Unschedulable))
	}
	if !strings.Contains(r.Unschedulable[0].Reason, "NodePool default: limits exhausted") {
		t.Fatalf("reason %q", r.Unschedulable[0].Reason)
	}
	placed := 0
	for _, nc := range r.NodeClaims {
		placed += len(nc.Pods)
	}
	if placed < 14 {
		t.Fatalf("only %d one-CPU pods placed within 16 CPU", placed)
	}
}

func TestInitContainersAndOverheadCount(t *testing.T) {
	in := solver.Input{Pods: pods(1, "job", "500m", "1Gi", func(p *corev1.Pod) {
		p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}}}}
		p.Spec.Overhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}
	}), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	// max(3, 0.5) + 0.25 = 3.25 CPU: fake-it-3 (4 CPU, 3.9 allocatable).
	if got := r.NodeClaims[0].InstanceTypes[0].Name; got != "fake-it-3" {
		t.Fatalf("cheapest type %s, want fake-it-3", got)
	}
}

func TestUnschedulableReasons(t *testing.T) {
	its := workload.FakeInstanceTypes(8)
	r := solve(t, solver.Input{Pods: pods(1, "huge", "96", "1Gi", nil), NodePools: []solver.NodePool{poolOf(its)},
		DaemonSetPods: []*corev1.Pod{workload.Pod("agent", "100m", "128Mi", nil)}}, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "no instance type has cpu 96 after daemonset overhead (the largest has cpu 7800m)") {
		t.Fatalf("reason %+v", r.Unschedulable)
	}
	r = solve(t, solver.Input{Pods: pods(1, "any", "1", "1Gi", nil)}, solver.Options{})
	if len(r.Unschedulable) != 1 || r.Unschedulable[0].Reason != "no NodePool" {
		t.Fatalf("reason %+v", r.Unschedulable)
	}
	r = solve(t, solver.Input{Pods: pods(1, "arm", "1", "1Gi", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{karpv1.ArchLabelKey: "arm64"}
	}), NodePools: []solver.NodePool{poolOf(its)}}, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "kubernetes.io/arch") {
		t.Fatalf("reason %+v", r.Unschedulable)
	}
}

func TestHostPortsAndPodCountSeparatePods(t *testing.T) {
	withPort := pods(2, "hp", "100m", "100Mi", func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{{HostPort: 9100, ContainerPort: 9100}}
	})
	r := solve(t, solver.Input{Pods: withPort, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(4))}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 2 {
		t.Fatalf("two pods on host port 9100 share a node: %d claims", len(r.NodeClaims))
	}
	// fake-it-0 holds 10 pods; 15 tiny pods need two of them (or one larger type).
	tiny := pods(15, "tiny", "10m", "10Mi", nil)
	r = solve(t, solver.Input{Pods: tiny, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(1))}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 2 {
		t.Fatalf("15 pods on 10-pod machines: %d claims, want 2", len(r.NodeClaims))
	}
}

func TestExtendedResourcesNeedTypesThatHaveThem(t *testing.T) {
	its := workload.FakeInstanceTypes(4)
	gpu := cloudprovider.NewInstanceType("gpu-1", map[string]string{karpv1.ArchLabelKey: "amd64", karpv1.OSLabelKey: "linux"},
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8"), corev1.ResourceMemory: resource.MustParse("32Gi"),
			corev1.ResourcePods: resource.MustParse("50"), "nvidia.com/gpu": resource.MustParse("1")}, nil,
		[]cloudprovider.Offering{{Zone: "test-zone-1", CapacityType: karpv1.CapacityTypeOnDemand, Price: 3, Available: true}})
	its = append(its, gpu)
	in := solver.Input{Pods: pods(2, "train", "1", "1Gi", func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
	}), NodePools: []solver.NodePool{poolOf(its)}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 2 || r.NodeClaims[0].InstanceTypes[0].Name != "gpu-1" || len(r.NodeClaims[0].InstanceTypes) != 1 {
		t.Fatalf("want two gpu-1 claims, got %d claims, first %v", len(r.NodeClaims), r.NodeClaims[0].InstanceTypes[0].Name)
	}
}

func TestWeightOrderAndExistingNodesFirst(t *testing.T) {
	its := workload.FakeInstanceTypes(8)
	low := solver.NodePool{Name: "low", Weight: 1, InstanceTypes: its}
	high := solver.NodePool{Name: "high", Weight: 90, InstanceTypes: its}
	r := solve(t, solver.Input{Pods: pods(1, "a", "1", "1Gi", nil), NodePools: []solver.NodePool{low, high}}, solver.Options{})
	if r.NodeClaims[0].NodePool != "high" {
		t.Fatalf("planned from %s, want the heavier pool", r.NodeClaims[0].NodePool)
	}
	r = solve(t, solver.Input{Pods: pods(2, "a", "1", "1Gi", nil), NodePools: []solver.NodePool{low},
		Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "4")}}, solver.Options{})
	if len(r.Bindings) != 2 || len(r.NodeClaims) != 0 {
		t.Fatalf("pods that fit an existing node got %d bindings, %d claims", len(r.Bindings), len(r.NodeClaims))
	}
}

func TestMinValuesKeepsEnoughTypes(t *testing.T) {
	pool := poolOf(workload.FakeInstanceTypes(100))
	r := requirements.MustNew(karpv1.InstanceTypeLabelKey, requirements.Exists)
	r.MinValues = 70
	pool.Requirements.Add(r)
	res := solve(t, solver.Input{Pods: pods(1, "a", "1", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
	wantAllPlaced(t, res)
	if n := len(res.NodeClaims[0].InstanceTypes); n < 70 {
		t.Fatalf("claim keeps %d instance types, minValues is 70", n)
	}
	r.MinValues = 200
	pool.Requirements = requirements.Requirements{}
	pool.Requirements.Add(r)
	res = solve(t, solver.Input{Pods: pods(1, "a", "1", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
	if len(res.Unschedulable) != 1 || !strings.Contains(res.Unschedulable[0].Reason, "minValues 200") {
		t.Fatalf("want minValues to block, got %+v", res.Unschedulable)
	}
}

func TestSpreadNodeTaintsPolicy(t *testing.T) {
	its := workload.FakeInstanceTypes(8)
	open := solver.NodePool{Name: "open", InstanceTypes: its}
	open.Requirements.Add(requirements.MustNew(zoneKey, requirements.In, "test-zone-1", "test-zone-2"))
	closed := solver.NodePool{Name: "closed", InstanceTypes: its, Taints: []corev1.Taint{{Key: "private", Effect: corev1.TaintEffectNoSchedule}}}
	closed.Requirements.Add(requirements.MustNew(zoneKey, requirements.In, "test-zone-3"))
	spread := func(policy *corev1.NodeInclusionPolicy) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey,
				WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: appSelector("web"), NodeTaintsPolicy: policy}}
		}
	}
	// Ignore (the default): zone 3 counts as a domain with no pods, so zones 1 and 2 take one each.
	r := solve(t, solver.Input{Pods: pods(4, "web", "500m", "1Gi", spread(nil)), NodePools: []solver.NodePool{open, closed}}, solver.Options{})
	if len(r.Unschedulable) != 2 {
		t.Fatalf("with nodeTaintsPolicy Ignore: %d unschedulable, want 2", len(r.Unschedulable))
	}
	// Honor: zone 3's machines carry a taint the pods do not tolerate, so it is not a domain.
	honor := corev1.NodeInclusionPolicyHonor
	r = solve(t, solver.Input{Pods: pods(4, "web", "500m", "1Gi", spread(&honor)), NodePools: []solver.NodePool{open, closed}}, solver.Options{})
	wantAllPlaced(t, r)
}

func TestPreferredPodAntiAffinityIsHonouredUnlessIgnored(t *testing.T) {
	spreadOut := func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
			Weight: 50, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: corev1.LabelHostname, LabelSelector: appSelector("web")}}}}}
	}
	in := solver.Input{Pods: pods(3, "web", "100m", "100Mi", spreadOut), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}
	if r := solve(t, in, solver.Options{}); len(r.NodeClaims) != 3 {
		t.Fatalf("preferred anti-affinity honoured: %d claims, want 3", len(r.NodeClaims))
	}
	if r := solve(t, in, solver.Options{IgnorePreferences: true}); len(r.NodeClaims) != 1 {
		t.Fatalf("preferences ignored: %d claims, want 1", len(r.NodeClaims))
	}
}

func TestPreferNoScheduleTaintsAreAvoidedThenAccepted(t *testing.T) {
	its := workload.FakeInstanceTypes(8)
	soft := solver.NodePool{Name: "soft", Weight: 100, InstanceTypes: its,
		Taints: []corev1.Taint{{Key: "spot-only", Effect: corev1.TaintEffectPreferNoSchedule}}}
	plain := solver.NodePool{Name: "plain", Weight: 1, InstanceTypes: its}
	r := solve(t, solver.Input{Pods: pods(1, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{soft, plain}}, solver.Options{})
	if r.NodeClaims[0].NodePool != "plain" {
		t.Fatalf("planned on %s; a PreferNoSchedule taint should be avoided while another pool fits", r.NodeClaims[0].NodePool)
	}
	r = solve(t, solver.Input{Pods: pods(1, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{soft}}, solver.Options{})
	wantAllPlaced(t, r)
	if r.NodeClaims[0].NodePool != "soft" {
		t.Fatalf("planned on %s, want soft once nothing else fits", r.NodeClaims[0].NodePool)
	}
}

// A node that refuses moved pods (RefusesMoved: inside its pool's consolidateAfter) refuses only
// them: a pod of the same shape that is not moved, placed after a moved one was refused there,
// still takes it. The existing-node cursor a shape keeps (nodes only fill up) must not skip a node
// that refused one pod for being moved.
func TestANodeThatRefusesMovedPodsTakesTheOthersOfTheirShape(t *testing.T) {
	ps := pods(2, "web", "1", "1Gi", nil)
	fresh := node("fresh", "test-zone-1", "1500m")
	fresh.RefusesMoved = true
	in := solver.Input{
		Pods:      ps,
		Nodes:     []solver.ExistingNode{fresh},
		NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))},
		Moved:     map[types.UID]bool{ps[0].UID: true},
	}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.Bindings) != 1 || r.Bindings[0].Pod != ps[1] || r.Bindings[0].Node != "fresh" {
		t.Errorf("bindings %+v; want %s (not moved) on the fresh node", r.Bindings, ps[1].Name)
	}
	if len(r.NodeClaims) != 1 || len(r.NodeClaims[0].Pods) != 1 || r.NodeClaims[0].Pods[0] != ps[0] {
		t.Errorf("%d new claims; want one, for the moved %s alone", len(r.NodeClaims), ps[0].Name)
	}
}
