package solver_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

func zoneSpread(maxSkew int32, app string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, corev1.TopologySpreadConstraint{
			MaxSkew: maxSkew, TopologyKey: zoneKey, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: appSelector(app)})
	}
}

func nodeAffinity(terms ...corev1.NodeSelectorTerm) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

func preferNode(weight int32, exprs ...corev1.NodeSelectorRequirement) corev1.PreferredSchedulingTerm {
	return corev1.PreferredSchedulingTerm{Weight: weight, Preference: corev1.NodeSelectorTerm{MatchExpressions: exprs}}
}

func in(key string, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
}

func claimPool(r *solver.Result, pod string) string {
	for _, nc := range r.NodeClaims {
		for _, p := range nc.Pods {
			if p.Name == pod {
				return nc.NodePool
			}
		}
	}
	return ""
}

// Item 1: a pool's taints are checked against each pod's own tolerations, even when a pod with
// the same requirements and other tolerations was checked first.
func TestPoolTaintsHonourEachPodsTolerations(t *testing.T) {
	dedicated := solver.NodePool{Name: "dedicated", Weight: 10, InstanceTypes: workload.FakeInstanceTypes(8),
		Taints: []corev1.Taint{{Key: "dedicated", Value: "batch", Effect: corev1.TaintEffectNoSchedule}}}
	plain := solver.NodePool{Name: "plain", InstanceTypes: workload.FakeInstanceTypes(8)}
	tolerant := pods(1, "tolerant", "2", "1Gi", func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	})
	intolerant := pods(1, "intolerant", "1", "1Gi", nil)
	in := solver.Input{Pods: append(tolerant, intolerant...), NodePools: []solver.NodePool{dedicated, plain}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if got := claimPool(r, "tolerant-0"); got != "dedicated" {
		t.Errorf("the tolerating pod went to %q, want the heavier pool dedicated", got)
	}
	if got := claimPool(r, "intolerant-0"); got != "plain" {
		t.Errorf("the pod without the toleration went to %q, want plain", got)
	}
	// Alone with the tainted pool, it is unschedulable for the taint.
	tolerate := func(p *corev1.Pod) { p.Spec.Tolerations = tolerant[0].Spec.Tolerations }
	in = solver.Input{Pods: append(pods(1, "tolerant", "2", "1Gi", tolerate), intolerant...), NodePools: []solver.NodePool{dedicated}}
	r = solve(t, in, solver.Options{})
	if len(r.Unschedulable) != 1 || r.Unschedulable[0].Pod.Name != "intolerant-0" || !strings.Contains(r.Unschedulable[0].Reason, "taint dedicated=batch:NoSchedule not tolerated") {
		t.Fatalf("want intolerant-0 unschedulable for the taint, got %+v", r.Unschedulable)
	}
}

// Item 2: with nodeAffinityPolicy Honor, a spread's domains are those of the machines the pod's
// whole node selector admits: a zone whose only pool the selector excludes does not count.
func TestSpreadDomainsComeFromTheWholeNodeSelector(t *testing.T) {
	small := solver.NodePool{Name: "small", InstanceTypes: workload.FakeInstanceTypes(8)}
	small.Requirements.Add(requirements.Single("size", "small"))
	small.Requirements.Add(requirements.Single(zoneKey, "test-zone-1"))
	large := solver.NodePool{Name: "large", InstanceTypes: workload.FakeInstanceTypes(8)}
	large.Requirements.Add(requirements.Single("size", "large"))
	large.Requirements.Add(requirements.MustNew(zoneKey, requirements.In, "test-zone-2", "test-zone-3"))
	ps := pods(4, "web", "2", "1Gi", func(p *corev1.Pod) {
		zoneSpread(1, "web")(p)
		p.Spec.NodeSelector = map[string]string{"size": "large"}
	})
	r := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{small, large}}, solver.Options{})
	wantAllPlaced(t, r)
	perZone := map[string]int{}
	for _, nc := range r.NodeClaims {
		perZone[zoneOf(nc)] += len(nc.Pods)
	}
	if perZone["test-zone-2"] != 2 || perZone["test-zone-3"] != 2 {
		t.Fatalf("want 2 pods in each of zones 2 and 3, got %v", perZone)
	}
	// With nodeAffinityPolicy Ignore, zone 1 counts (with 0 pods) and caps the others at 1.
	ignore := corev1.NodeInclusionPolicyIgnore
	for _, p := range ps {
		p.Spec.TopologySpreadConstraints[0].NodeAffinityPolicy = &ignore
	}
	r = solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{small, large}}, solver.Options{})
	if len(r.Unschedulable) != 2 {
		t.Fatalf("with Ignore, want 2 pods unschedulable (zone 1 counts with no pod), got %d", len(r.Unschedulable))
	}
}

// Item 2: preferred node affinity never narrows a spread's domains, and a preference that
// conflicts with a DoNotSchedule spread gives way to it.
func TestPreferredNodeAffinityYieldsToSpread(t *testing.T) {
	ps := pods(3, "web", "2", "1Gi", func(p *corev1.Pod) {
		zoneSpread(1, "web")(p)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			preferNode(100, in(zoneKey, "test-zone-1"))}}}
	})
	r := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}, solver.Options{})
	wantAllPlaced(t, r)
	perZone := map[string]int{}
	for _, nc := range r.NodeClaims {
		perZone[zoneOf(nc)] += len(nc.Pods)
	}
	if perZone["test-zone-1"] != 1 || perZone["test-zone-2"] != 1 || perZone["test-zone-3"] != 1 {
		t.Fatalf("want one pod per zone, got %v", perZone)
	}
}

// Item 3: preferred node-affinity terms are alternatives, tried heaviest first, each alone.
func TestPreferredNodeAffinityTermsAreAlternativesHeaviestFirst(t *testing.T) {
	pool := []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}
	prefer := func(terms ...corev1.PreferredSchedulingTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}
		}
	}
	// Weight 100 cannot be met (zone 3 sells no spot): weight 50 is tried alone, not nothing.
	r := solve(t, solver.Input{Pods: pods(1, "a", "1", "1Gi", prefer(
		preferNode(50, in(zoneKey, "test-zone-2")),
		preferNode(100, in(zoneKey, "test-zone-3"), in(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeSpot)),
	)), NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	if got := zoneOf(r.NodeClaims[0]); got != "test-zone-2" {
		t.Errorf("want the weight-50 term (test-zone-2) once weight 100 fails, got %q (%s)", got, r.NodeClaims[0].Requirements.String())
	}
	// Conflicting terms are not ANDed: the heaviest wins, the lighter is not enforced with it.
	r = solve(t, solver.Input{Pods: pods(1, "b", "1", "1Gi", prefer(
		preferNode(10, in(zoneKey, "test-zone-1")),
		preferNode(90, in(zoneKey, "test-zone-2")),
	)), NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	if got := zoneOf(r.NodeClaims[0]); got != "test-zone-2" {
		t.Errorf("want the heaviest term (test-zone-2), got %q", got)
	}
	// A lighter term that could hold with the heaviest is not enforced alongside it.
	r = solve(t, solver.Input{Pods: pods(1, "c", "1", "1Gi", prefer(
		preferNode(100, in(zoneKey, "test-zone-1")),
		preferNode(1, in(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeOnDemand)),
	)), NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	if ct, ok := r.NodeClaims[0].Requirements.Get(karpv1.CapacityTypeLabelKey); ok && ct.Len() == 1 {
		t.Errorf("the lighter alternative was enforced too: %s", r.NodeClaims[0].Requirements.String())
	}
}

// Item 4: deprecated labels in selectors, affinity and spreads mean the stable ones.
func TestDeprecatedLabelsMeanTheStableOnes(t *testing.T) {
	pool := []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}
	r := solve(t, solver.Input{Pods: pods(1, "zone", "1", "1Gi", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{corev1.LabelFailureDomainBetaZone: "test-zone-2", "beta.kubernetes.io/os": "linux"}
	}), NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	if got := zoneOf(r.NodeClaims[0]); got != "test-zone-2" {
		t.Errorf("failure-domain.beta.kubernetes.io/zone: want the claim in test-zone-2, got %q (%s)", got, r.NodeClaims[0].Requirements.String())
	}
	r = solve(t, solver.Input{Pods: pods(1, "type", "1", "1Gi", nodeAffinity(corev1.NodeSelectorTerm{
		MatchExpressions: []corev1.NodeSelectorRequirement{in(corev1.LabelInstanceType, "fake-it-5")}})), NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	if its := r.NodeClaims[0].InstanceTypes; len(its) != 1 || its[0].Name != "fake-it-5" {
		t.Errorf("beta.kubernetes.io/instance-type: want only fake-it-5, got %d types", len(its))
	}
	r = solve(t, solver.Input{Pods: pods(1, "arm", "1", "1Gi", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{"beta.kubernetes.io/arch": "arm64"}
	}), NodePools: pool}, solver.Options{})
	if len(r.Unschedulable) != 1 {
		t.Errorf("beta.kubernetes.io/arch=arm64 on an amd64-only pool: want unschedulable, got %d claims", len(r.NodeClaims))
	}
	ps := pods(3, "web", "2", "1Gi", func(p *corev1.Pod) {
		zoneSpread(1, "web")(p)
		p.Spec.TopologySpreadConstraints[0].TopologyKey = corev1.LabelFailureDomainBetaZone
	})
	r = solve(t, solver.Input{Pods: ps, NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	zones := map[string]bool{}
	for _, nc := range r.NodeClaims {
		zones[zoneOf(nc)] = true
	}
	if len(zones) != 3 || zones[""] {
		t.Errorf("a spread on failure-domain.beta.kubernetes.io/zone: want three zones, got %v", zones)
	}
}

// Item 5: limits.nodes counts machines.
func TestNodesLimitCountsMachines(t *testing.T) {
	for _, tc := range []struct {
		types, limit, pods int
		cpu                string
	}{
		{types: 8, limit: 3, pods: 100, cpu: "1"},
		{types: 2, limit: 2, pods: 10, cpu: "1500m"},
	} {
		pool := poolOf(workload.FakeInstanceTypes(tc.types))
		pool.Remaining = corev1.ResourceList{karpv1.ResourceNodes: *resource.NewQuantity(int64(tc.limit), resource.DecimalSI)}
		r := solve(t, solver.Input{Pods: pods(tc.pods, "web", tc.cpu, "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
		if len(r.NodeClaims) != tc.limit {
			t.Errorf("want exactly %d claims under limits.nodes %d, got %d", tc.limit, tc.limit, len(r.NodeClaims))
		}
		if len(r.Unschedulable) == 0 {
			t.Fatalf("limits.nodes %d: want the rest unschedulable for the nodes limit, got none", tc.limit)
		}
		for _, u := range r.Unschedulable {
			if !strings.Contains(u.Reason, "limits exhausted: nodes 0 left") {
				t.Fatalf("limits.nodes %d: reason %q", tc.limit, u.Reason)
			}
		}
	}
	pool := poolOf(workload.FakeInstanceTypes(8))
	// Existing nodes take pods without counting against what is left.
	pool.Remaining = corev1.ResourceList{karpv1.ResourceNodes: resource.MustParse("0")}
	r := solve(t, solver.Input{Pods: pods(2, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{pool},
		Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "4")}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.Bindings) != 2 {
		t.Errorf("want both pods on the existing node, got %d bindings", len(r.Bindings))
	}
}

// Item 8: reasons never have empty slots, and minValues survives the candidate cut.
func TestTooBigReasonNamesTheShortfall(t *testing.T) {
	mk := func(name, cpu, mem string) *cloudprovider.InstanceType {
		return cloudprovider.NewInstanceType(name, map[string]string{karpv1.ArchLabelKey: "amd64", karpv1.OSLabelKey: "linux"},
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourcePods: resource.MustParse("110")},
			nil, []cloudprovider.Offering{{Zone: "test-zone-1", CapacityType: karpv1.CapacityTypeOnDemand, Price: 1, Available: true}})
	}
	pool := poolOf([]*cloudprovider.InstanceType{mk("cpu-heavy", "16", "4Gi"), mk("mem-heavy", "2", "64Gi")})
	r := solve(t, solver.Input{Pods: pods(1, "big", "8", "32Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
	if len(r.Unschedulable) != 1 {
		t.Fatalf("want the pod unschedulable, got %d claims", len(r.NodeClaims))
	}
	reason := r.Unschedulable[0].Reason
	if !strings.Contains(reason, "no instance type has cpu 8, memory 32Gi") || strings.Contains(reason, "  ") || strings.Contains(reason, "()") {
		t.Fatalf("reason %q: want the combined shortfall named, no empty slots", reason)
	}
	r = solve(t, solver.Input{Pods: pods(1, "huge", "32", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
	if reason := r.Unschedulable[0].Reason; !strings.Contains(reason, "no instance type has cpu 32 (the largest has cpu 16)") {
		t.Fatalf("reason %q", reason)
	}
}

func TestMinValuesHoldsAfterTheCandidateCut(t *testing.T) {
	pool := poolOf(workload.FakeInstanceTypes(100))
	mv := requirements.MustNew(karpv1.InstanceTypeLabelKey, requirements.Exists)
	mv.MinValues = 70
	pool.Requirements.Add(mv)
	r := solve(t, solver.Input{Pods: pods(1, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{MaxInstanceTypes: 60})
	wantAllPlaced(t, r)
	if n := len(r.NodeClaims[0].InstanceTypes); n < 70 {
		t.Fatalf("minValues 70 on instance types: the claim lists %d", n)
	}
	// Pods that only the largest types hold leave too few values: unschedulable with the reason.
	r = solve(t, solver.Input{Pods: pods(1, "big", "50", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{MaxInstanceTypes: 60})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "minValues 70 of node.kubernetes.io/instance-type not met") {
		t.Fatalf("want minValues named as the reason, got %+v", r.Unschedulable)
	}
}

// Item 9: an empty nodeSelectorTerm matches no node; matchFields on metadata.name is honoured.
func TestNodeSelectorTermEdgeCases(t *testing.T) {
	pool := []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}
	r := solve(t, solver.Input{Pods: pods(1, "empty", "1", "1Gi", nodeAffinity(corev1.NodeSelectorTerm{})), NodePools: pool}, solver.Options{})
	if len(r.Unschedulable) != 1 || !strings.Contains(r.Unschedulable[0].Reason, "empty") {
		t.Fatalf("an empty term matches no node: want unschedulable, got %d claims, %+v", len(r.NodeClaims), r.Unschedulable)
	}
	r = solve(t, solver.Input{Pods: pods(1, "or", "1", "1Gi", nodeAffinity(corev1.NodeSelectorTerm{},
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in(zoneKey, "test-zone-2")}})), NodePools: pool}, solver.Options{})
	wantAllPlaced(t, r)
	if zoneOf(r.NodeClaims[0]) != "test-zone-2" {
		t.Fatalf("want the non-empty term used, got %s", r.NodeClaims[0].Requirements.String())
	}

	nodes := []solver.ExistingNode{node("n1", "test-zone-1", "8"), node("n2", "test-zone-2", "8")}
	byName := func(op corev1.NodeSelectorOperator, names ...string) func(*corev1.Pod) {
		return nodeAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: op, Values: names}}})
	}
	r = solve(t, solver.Input{Pods: pods(1, "pinned", "1", "1Gi", byName(corev1.NodeSelectorOpIn, "n2")), NodePools: pool, Nodes: nodes}, solver.Options{})
	if len(r.Bindings) != 1 || r.Bindings[0].Node != "n2" {
		t.Fatalf("matchFields metadata.name In [n2]: want a binding on n2, got %+v", r.Bindings)
	}
	r = solve(t, solver.Input{Pods: pods(1, "gone", "1", "1Gi", byName(corev1.NodeSelectorOpIn, "n9")), NodePools: pool, Nodes: nodes}, solver.Options{})
	if len(r.Unschedulable) != 1 || len(r.NodeClaims) != 0 || !strings.Contains(r.Unschedulable[0].Reason, "metadata.name") {
		t.Fatalf("matchFields metadata.name In [n9]: no node has that name and a new machine cannot: got %d claims, %+v", len(r.NodeClaims), r.Unschedulable)
	}
	// Kubernetes allows one value per matchFields requirement.
	r = solve(t, solver.Input{Pods: pods(1, "away", "1", "1Gi", byName(corev1.NodeSelectorOpNotIn, "n1")), NodePools: pool, Nodes: nodes[:1]}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.Bindings) != 0 || len(r.NodeClaims) != 1 {
		t.Fatalf("matchFields metadata.name NotIn [n1]: want a new claim, got %d bindings, %d claims", len(r.Bindings), len(r.NodeClaims))
	}
}

// Item 9: a bound pod being resized counts the larger of its desired and allocated requests, as
// kube-scheduler counts it.
func TestResizingPodsCountTheirAllocatedResources(t *testing.T) {
	bound := workload.Pod("resizing", "1", "1Gi", nil)
	bound.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", AllocatedResources: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}
	n := node("n1", "test-zone-1", "4", bound)
	r := solve(t, solver.Input{Pods: pods(1, "web", "2", "1Gi", nil), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))},
		Nodes: []solver.ExistingNode{n}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.Bindings) != 0 {
		t.Fatalf("the node holds 3 allocated CPUs of 4: a 2-CPU pod does not fit, but was bound to %s", r.Bindings[0].Node)
	}
}
