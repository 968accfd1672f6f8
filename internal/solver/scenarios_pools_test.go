package solver_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

func named(p solver.NodePool, name string, weight int32) solver.NodePool {
	p.Name, p.Weight = name, weight
	p.Requirements = p.Requirements.Clone()
	return p
}

func limited(p solver.NodePool, rl corev1.ResourceList) solver.NodePool {
	p.Remaining = rl
	return p
}

func wantPool(name string) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		wantAllPlaced(t, r)
		for _, nc := range r.NodeClaims {
			if nc.NodePool != name {
				t.Fatalf("claim from pool %s, want %s", nc.NodePool, name)
			}
		}
	}
}

func wantCheapest(name string) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		wantAllPlaced(t, r)
		if len(r.NodeClaims) != 1 || r.NodeClaims[0].InstanceTypes[0].Name != name {
			got := ""
			if len(r.NodeClaims) > 0 {
				got = r.NodeClaims[0].InstanceTypes[0].Name
			}
			t.Fatalf("%d claims, cheapest %s, want one claim on %s", len(r.NodeClaims), got, name)
		}
	}
}

func TestScenariosPreferences(t *testing.T) {
	prefer := func(terms ...corev1.PreferredSchedulingTerm) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: terms}}
		}
	}
	pool := func() []solver.NodePool { return []solver.NodePool{scenarioPool()} }
	runScenarios(t, []scenario{
		{name: "a satisfiable preferred zone is honoured", in: solver.Input{Pods: pods(2, "p", "500m", "512Mi", prefer(preferNode(10, in(zoneKey, "test-zone-3")))), NodePools: pool()},
			check: wantClaimKey(zoneKey, []string{"test-zone-3"}, "test-zone-1")},
		{name: "an unsatisfiable preferred zone is relaxed", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", prefer(preferNode(10, in(zoneKey, "test-zone-9")))), NodePools: pool()},
			check: wantClaims(1)},
		{name: "the heaviest satisfiable preference wins", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", prefer(
			preferNode(10, in(zoneKey, "test-zone-1")), preferNode(90, in(zoneKey, "test-zone-2")))), NodePools: pool()},
			check: wantClaimKey(zoneKey, []string{"test-zone-2"}, "test-zone-1")},
		{name: "an unsatisfiable heaviest preference yields to the next", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", prefer(
			preferNode(10, in(zoneKey, "test-zone-1")), preferNode(90, in(zoneKey, "test-zone-9")))), NodePools: pool()},
			check: wantClaimKey(zoneKey, []string{"test-zone-1"}, "test-zone-2")},
		{name: "a preferred architecture is honoured", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", prefer(preferNode(50, in(karpv1.ArchLabelKey, karpv1.ArchitectureArm64)))), NodePools: pool()},
			check: wantEveryCandidate("arm64", func(it *cloudprovider.InstanceType) bool {
				return typeLabel(it, karpv1.ArchLabelKey) == karpv1.ArchitectureArm64
			})},
		{name: "preferences are ignored when asked", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", prefer(preferNode(50, in(karpv1.ArchLabelKey, karpv1.ArchitectureArm64)))), NodePools: pool()},
			opts: solver.Options{IgnorePreferences: true}, check: wantCheapest("fake-it-0")},
		{name: "a preference never overrides a requirement", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", func(p *corev1.Pod) {
			prefer(preferNode(100, in(zoneKey, "test-zone-1")))(p)
			p.Spec.NodeSelector = map[string]string{zoneKey: "test-zone-2"}
		}), NodePools: pool()}, check: wantClaimKey(zoneKey, []string{"test-zone-2"}, "test-zone-1")},
		{name: "a ScheduleAnyway spread yields when a zone is excluded", in: solver.Input{Pods: pods(3, "p", "500m", "512Mi", func(p *corev1.Pod) {
			spread(zoneKey, 1, corev1.ScheduleAnyway, "p")(p)
			p.Spec.NodeSelector = map[string]string{zoneKey: "test-zone-1"}
		}), NodePools: pool()}, check: wantClaimKey(zoneKey, []string{"test-zone-1"})},
	})
}

func TestScenariosNodePools(t *testing.T) {
	base := scenarioPool()
	cheapOnly := named(base, "small", 0)
	cheapOnly.Requirements.Add(requirements.MustNew("karpenter.k8s.aws/instance-cpu", requirements.Lt, "3"))
	big := named(base, "big", 0)
	big.Requirements.Add(requirements.MustNew("karpenter.k8s.aws/instance-cpu", requirements.Gt, "3"))
	cpu := func(v string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(v)}
	}
	runScenarios(t, []scenario{
		{name: "a heavier pool wins even when dearer", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{named(cheapOnly, "small", 10), named(big, "big", 50)}}, check: wantPool("big")},
		{name: "among equal weights pools are tried in name order", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{cheapOnly, big}}, check: wantPool("big")},
		{name: "a pod that fits only the lighter pool goes there", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{"karpenter.k8s.aws/instance-cpu": "1"}
		}), NodePools: []solver.NodePool{named(big, "big", 50), named(cheapOnly, "small", 10)}}, check: wantPool("small")},
		{name: "a pool whose taint the pod does not tolerate is skipped", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{func() solver.NodePool {
				p := named(big, "big", 50)
				p.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
				return p
			}(), named(cheapOnly, "small", 10)}}, check: wantPool("small")},
		{name: "a cpu limit caps what is bought", in: solver.Input{Pods: pods(10, "p", "1", "512Mi", spread(corev1.LabelHostname, 1, corev1.DoNotSchedule, "p")),
			NodePools: []solver.NodePool{limited(named(cheapOnly, "small", 0), cpu("6"))}}, check: func(t *testing.T, r *solver.Result) {
			total := int64(0)
			for _, nc := range r.NodeClaims {
				largest := int64(0)
				for _, it := range nc.InstanceTypes {
					largest = max(largest, it.Capacity.Cpu().Value())
				}
				total += largest
			}
			if total > 6 || len(r.Unschedulable) == 0 {
				t.Fatalf("claims could launch %d CPU against a limit of 6 with %d pods pending", total, len(r.Unschedulable))
			}
		}},
		{name: "an exhausted pool falls back to the next", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{limited(named(big, "big", 50), cpu("0")), named(cheapOnly, "small", 10)}}, check: wantPool("small")},
		{name: "a memory limit excludes types above it", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{limited(named(base, "mem", 0), corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4Gi")})}},
			check: wantEveryCandidate("of at most 4Gi", func(it *cloudprovider.InstanceType) bool {
				return it.Capacity.Memory().Cmp(resource.MustParse("4Gi")) <= 0
			})},
		{name: "a nodes limit of one packs onto one machine", in: solver.Input{Pods: pods(4, "p", "1", "512Mi", nil),
			NodePools: []solver.NodePool{limited(named(base, "one", 0), corev1.ResourceList{karpv1.ResourceNodes: resource.MustParse("1")})}}, check: wantClaims(1)},
		{name: "no pool is unschedulable with a reason", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil)}, check: wantUnschedulable(1, "no NodePool")},
		{name: "a pool without instance types is skipped", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{named(poolOf(nil), "empty", 90), named(base, "ok", 1)}}, check: wantPool("ok")},
	})
}

// minValuesPool is the scenario pool asking for at least n instance types per claim.
func minValuesPool(n int) solver.NodePool {
	p := scenarioPool()
	r := requirements.MustNew(karpv1.InstanceTypeLabelKey, requirements.Exists)
	r.MinValues = n
	p.Requirements.Add(r)
	return p
}

func TestScenariosInstanceSelection(t *testing.T) {
	var cases []scenario
	for i, cpu := range []string{"100m", "800m", "1500m", "2500m", "3500m", "5", "7"} {
		want := []string{"fake-it-0", "fake-it-0", "fake-it-1", "fake-it-2", "fake-it-3", "fake-it-5", "fake-it-7"}[i]
		cases = append(cases, scenario{name: fmt.Sprintf("one pod of %s CPU gets the cheapest type that holds it", cpu),
			in: solver.Input{Pods: pods(1, "p", cpu, "256Mi", nil), NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}, check: wantCheapest(want)})
	}
	gpuPod := func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("1")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	}
	cases = append(cases,
		scenario{name: "an extended resource selects the types that have it", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", gpuPod), NodePools: []solver.NodePool{scenarioPool()}},
			check: wantCheapest("gpu-8")},
		scenario{name: "more of an extended resource than any type has is unschedulable", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", func(p *corev1.Pod) {
			gpuPod(p)
			p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("2")
		}), NodePools: []solver.NodePool{scenarioPool()}}, check: wantUnschedulable(1, "nvidia.com/gpu")},
		scenario{name: "a pod larger than every type is unschedulable naming the shortfall", in: solver.Input{Pods: pods(1, "p", "64", "512Mi", nil),
			NodePools: []solver.NodePool{scenarioPool()}}, check: wantUnschedulable(1, "cpu 64")},
		scenario{name: "a claim lists several candidate types, cheapest first", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil), NodePools: []solver.NodePool{scenarioPool()}},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				its := r.NodeClaims[0].InstanceTypes
				if len(its) < 2 {
					t.Fatalf("%d candidates", len(its))
				}
				for i := 1; i < len(its); i++ {
					if cpus(its[i]) < cpus(its[i-1]) && its[i].Name[:4] == its[i-1].Name[:4] {
						t.Fatalf("candidates not cheapest first: %s before %s", its[i-1].Name, its[i].Name)
					}
				}
			}},
		scenario{name: "minValues on instance types keeps that many candidates", in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil),
			NodePools: []solver.NodePool{minValuesPool(5)}}, check: func(t *testing.T, r *solver.Result) {
			wantAllPlaced(t, r)
			if n := len(r.NodeClaims[0].InstanceTypes); n < 5 {
				t.Fatalf("%d candidates, want at least minValues 5", n)
			}
		}},
		scenario{name: "minValues that cannot hold is unschedulable", in: solver.Input{Pods: pods(1, "p", "6", "512Mi", nil),
			NodePools: []solver.NodePool{minValuesPool(5)}}, check: wantUnschedulable(1, "minValues")},
		scenario{name: "minValues best effort launches with the types there are", in: solver.Input{Pods: pods(1, "p", "6", "512Mi", nil),
			NodePools: []solver.NodePool{minValuesPool(5)}}, opts: solver.Options{MinValuesBestEffort: true}, check: wantClaims(1)},
		scenario{name: "small pods share a machine", in: solver.Input{Pods: pods(6, "p", "250m", "256Mi", nil), NodePools: []solver.NodePool{scenarioPool()}}, check: wantClaims(1)},
		scenario{name: "pods that cannot share a type get their own machines", in: solver.Input{Pods: pods(2, "p", "5", "256Mi", nil),
			NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))}}, check: wantClaims(2)},
	)
	runScenarios(t, cases)
}

func TestScenariosDaemonSetsAndExistingNodes(t *testing.T) {
	ds := func(cpu string, mutate func(*corev1.Pod)) *corev1.Pod {
		p := workload.Pod("ds-"+cpu, cpu, "64Mi", nil)
		if mutate != nil {
			mutate(p)
		}
		return p
	}
	pool := func() []solver.NodePool { return []solver.NodePool{poolOf(workload.FakeInstanceTypes(8))} }
	tainted := func() []solver.NodePool {
		p := poolOf(workload.FakeInstanceTypes(8))
		p.Taints = []corev1.Taint{{Key: "dedicated", Effect: corev1.TaintEffectNoSchedule}}
		return []solver.NodePool{p}
	}
	tolerateAll := func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	podTolerates := func(p *corev1.Pod) { tolerateAll(p) }
	cordoned := node("cordoned", "test-zone-1", "16")
	cordoned.Unschedulable = true
	taintedNode := node("tainted", "test-zone-1", "16")
	taintedNode.Taints = []corev1.Taint{{Key: "maintenance", Effect: corev1.TaintEffectNoSchedule}}
	runScenarios(t, []scenario{
		{name: "daemonset overhead moves a pod to the next size", in: solver.Input{Pods: pods(1, "p", "800m", "256Mi", nil), NodePools: pool(),
			DaemonSetPods: []*corev1.Pod{ds("200m", nil)}}, check: wantCheapest("fake-it-1")},
		{name: "a daemonset that does not tolerate the pool's taint adds nothing", in: solver.Input{Pods: pods(1, "p", "800m", "256Mi", podTolerates), NodePools: tainted(),
			DaemonSetPods: []*corev1.Pod{ds("200m", nil)}}, check: wantCheapest("fake-it-0")},
		{name: "a daemonset tolerating everything counts on tainted pools", in: solver.Input{Pods: pods(1, "p", "800m", "256Mi", podTolerates), NodePools: tainted(),
			DaemonSetPods: []*corev1.Pod{ds("200m", tolerateAll)}}, check: wantCheapest("fake-it-1")},
		{name: "a daemonset selecting another architecture adds nothing", in: solver.Input{Pods: pods(1, "p", "800m", "256Mi", nil), NodePools: pool(),
			DaemonSetPods: []*corev1.Pod{ds("200m", func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64}
			})}},
			check: wantCheapest("fake-it-0")},
		{name: "a daemonset selecting a label no pool sets adds nothing", in: solver.Input{Pods: pods(1, "p", "800m", "256Mi", nil), NodePools: pool(),
			DaemonSetPods: []*corev1.Pod{ds("200m", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"example.com/gpu": "true"} })}},
			check: wantCheapest("fake-it-0")},
		{name: "several daemonsets add up", in: solver.Input{Pods: pods(1, "p", "500m", "256Mi", nil), NodePools: pool(),
			DaemonSetPods: []*corev1.Pod{ds("300m", nil), ds("400m", nil)}}, check: wantCheapest("fake-it-1")},
		{name: "pods go to an existing node with room before a new machine", in: solver.Input{Pods: pods(3, "p", "1", "256Mi", nil), NodePools: pool(),
			Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "4")}}, check: func(t *testing.T, r *solver.Result) {
			wantAllPlaced(t, r)
			if len(r.Bindings) != 3 || len(r.NodeClaims) != 0 {
				t.Fatalf("%d bindings, %d claims; want all three on n1", len(r.Bindings), len(r.NodeClaims))
			}
		}},
		{name: "an existing node's pods take its room", in: solver.Input{Pods: pods(2, "p", "1", "256Mi", nil), NodePools: pool(),
			Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "2", pods(1, "old", "1500m", "256Mi", nil)...)}}, check: func(t *testing.T, r *solver.Result) {
			wantAllPlaced(t, r)
			if len(r.Bindings) != 0 || len(r.NodeClaims) != 1 {
				t.Fatalf("%d bindings, %d claims; n1 has 500m left", len(r.Bindings), len(r.NodeClaims))
			}
		}},
		{name: "a cordoned node takes no pods", in: solver.Input{Pods: pods(1, "p", "1", "256Mi", nil), NodePools: pool(), Nodes: []solver.ExistingNode{cordoned}},
			check: func(t *testing.T, r *solver.Result) {
				if len(r.Bindings) != 0 {
					t.Fatal("a pod was bound to a cordoned node")
				}
			}},
		{name: "a node whose taint the pod does not tolerate takes no pods", in: solver.Input{Pods: pods(1, "p", "1", "256Mi", nil), NodePools: pool(),
			Nodes: []solver.ExistingNode{taintedNode}}, check: func(t *testing.T, r *solver.Result) {
			if len(r.Bindings) != 0 {
				t.Fatal("a pod was bound to a node whose taint it does not tolerate")
			}
		}},
		{name: "a pod selecting an existing node's zone binds there", in: solver.Input{Pods: pods(1, "p", "1", "256Mi", func(p *corev1.Pod) {
			p.Spec.NodeSelector = map[string]string{zoneKey: "test-zone-2"}
		}), NodePools: pool(), Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "8"), node("n2", "test-zone-2", "8")}},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				if len(r.Bindings) != 1 || r.Bindings[0].Node != "n2" {
					t.Fatalf("bindings %v, want n2", r.Bindings)
				}
			}},
		{name: "a pod with no pool and no room is unschedulable", in: solver.Input{Pods: pods(1, "p", "8", "256Mi", nil),
			Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "2")}}, check: wantUnschedulable(1, "")},
	})
}

// A pool whose launches do not register (NodeRegistrationHealthy=False) is tried after every
// other pool, whatever its weight; it still takes pods no other pool can.
func TestRegistrationUnhealthyPoolIsTriedLast(t *testing.T) {
	broken := solver.NodePool{Name: "broken", Weight: 100, RegistrationUnhealthy: true, InstanceTypes: workload.FakeInstanceTypes(8)}
	fallback := solver.NodePool{Name: "fallback", Weight: 1, InstanceTypes: workload.FakeInstanceTypes(8)}
	in := solver.Input{Pods: pods(1, "web", "1", "1Gi", nil), NodePools: []solver.NodePool{broken, fallback}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if got := claimPool(r, "web-0"); got != "fallback" {
		t.Fatalf("the pod went to %q, want fallback: broken's launches do not register", got)
	}
	broken.RegistrationUnhealthy = false
	in.NodePools = []solver.NodePool{broken, fallback}
	if got := claimPool(solve(t, in, solver.Options{}), "web-0"); got != "broken" {
		t.Fatalf("healthy again, the heavier pool should be first; the pod went to %q", got)
	}
	// Only the unhealthy pool takes the pod: it is still used.
	only := pods(1, "gpu", "1", "1Gi", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "broken"} })
	broken.RegistrationUnhealthy = true
	broken.Requirements.Add(requirements.Single("pool", "broken"))
	in = solver.Input{Pods: only, NodePools: []solver.NodePool{broken, fallback}}
	r = solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if got := claimPool(r, "gpu-0"); got != "broken" {
		t.Fatalf("the pod only the unhealthy pool fits went to %q", got)
	}
}
