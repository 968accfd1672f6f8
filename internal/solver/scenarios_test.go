package solver_test

// Scheduling scenarios in the families Karpenter's public scheduling test suite pins down
// (selection by requirements, numeric operators, taints, topology spread, pod affinity and
// anti-affinity, preferences, NodePool weights and limits, instance selection, DaemonSets,
// existing nodes), written here as tables. Each case is named after the behaviour it pins; every
// solve also passes the independent verifier (internal/solver/verify). docs/solver.md lists the
// families and where Capstan deliberately differs.

import (
	"fmt"
	"strconv"
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

// scenario is one solve and what its plan must show.
type scenario struct {
	name  string
	in    solver.Input
	opts  solver.Options
	check func(t *testing.T, r *solver.Result)
}

func runScenarios(t *testing.T, cases []scenario) {
	t.Helper()
	seen := map[string]bool{}
	for _, sc := range cases {
		if seen[sc.name] {
			t.Fatalf("two scenarios named %q", sc.name)
		}
		seen[sc.name] = true
		t.Run(sc.name, func(t *testing.T) {
			sc.check(t, solve(t, sc.in, sc.opts))
		})
	}
}

// scenarioTypes are eight amd64 types of 1–8 CPU (fake-it-0…7), two arm64 types of 2 and 4 CPU
// (arm-2, arm-4), every one labelled with karpenter.k8s.aws/instance-cpu, and one GPU type.
func scenarioTypes() []*cloudprovider.InstanceType {
	fake := workload.FakeInstanceTypes(8)
	var out []*cloudprovider.InstanceType
	for i, it := range fake {
		out = append(out, relabel(it, it.Name, map[string]string{"karpenter.k8s.aws/instance-cpu": strconv.Itoa(i + 1)}))
	}
	out = append(out,
		relabel(fake[1], "arm-2", map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64, "karpenter.k8s.aws/instance-cpu": "2"}),
		relabel(fake[3], "arm-4", map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64, "karpenter.k8s.aws/instance-cpu": "4"}))
	gpu := relabel(fake[7], "gpu-8", map[string]string{"karpenter.k8s.aws/instance-cpu": "8", "karpenter.k8s.aws/instance-gpu-count": "1"})
	gpu.Capacity = gpu.Capacity.DeepCopy()
	gpu.Capacity["nvidia.com/gpu"] = *resourceQuantity(1)
	return append(out, gpu)
}

// scenarioPool is the default pool over scenarioTypes with the template label team=web.
func scenarioPool() solver.NodePool {
	p := poolOf(scenarioTypes())
	p.Requirements.Add(requirements.Single("team", "web"))
	return p
}

// --- checks ---

func wantClaims(n int) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		wantAllPlaced(t, r)
		if len(r.NodeClaims) != n {
			t.Fatalf("%d claims, want %d", len(r.NodeClaims), n)
		}
	}
}

func wantUnschedulable(n int, reason string) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		if len(r.Unschedulable) != n {
			t.Fatalf("%d pods unschedulable, want %d", len(r.Unschedulable), n)
		}
		for _, u := range r.Unschedulable {
			if !strings.Contains(u.Reason, reason) {
				t.Fatalf("reason %q does not mention %q", u.Reason, reason)
			}
		}
	}
}

// wantEveryCandidate checks every candidate type of every claim.
func wantEveryCandidate(desc string, ok func(*cloudprovider.InstanceType) bool) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		wantAllPlaced(t, r)
		if len(r.NodeClaims) == 0 {
			t.Fatal("no claim")
		}
		for _, nc := range r.NodeClaims {
			for _, it := range nc.InstanceTypes {
				if !ok(it) {
					t.Fatalf("candidate %s is not %s", it.Name, desc)
				}
			}
		}
	}
}

// wantClaimKey checks every claim's requirement on key allows exactly the values wanted among
// those listed.
func wantClaimKey(key string, allowed []string, forbidden ...string) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		wantAllPlaced(t, r)
		for _, nc := range r.NodeClaims {
			req, ok := nc.Requirements.Get(key)
			for _, v := range allowed {
				if ok && !req.Allows(v) {
					t.Fatalf("claim's %s (%s) does not allow %s", key, req.String(), v)
				}
			}
			for _, v := range forbidden {
				if !ok || req.Allows(v) {
					t.Fatalf("claim's %s (%s) allows %s", key, req.String(), v)
				}
			}
		}
	}
}

func all(checks ...func(*testing.T, *solver.Result)) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		for _, c := range checks {
			c(t, r)
		}
	}
}

func typeLabel(it *cloudprovider.InstanceType, key string) string {
	r, ok := it.Requirements.Get(key)
	if !ok || len(r.Values()) != 1 {
		return ""
	}
	return r.Values()[0]
}

func cpus(it *cloudprovider.InstanceType) int {
	n, _ := strconv.Atoi(typeLabel(it, "karpenter.k8s.aws/instance-cpu"))
	return n
}

// --- family: selection by node selector and required node affinity ---

func TestScenariosSelectionByRequirements(t *testing.T) {
	type key struct {
		name, key, valid, invalid string
		// defined: every machine of the pool carries the label.
		defined bool
	}
	keys := []key{
		{"zone", zoneKey, "test-zone-2", "test-zone-9", true},
		{"capacity type", karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeSpot, "invalid", true},
		{"instance type", karpv1.InstanceTypeLabelKey, "fake-it-3", "m5.large", true},
		{"architecture", karpv1.ArchLabelKey, karpv1.ArchitectureArm64, "s390x", true},
		{"operating system", karpv1.OSLabelKey, karpv1.OSLinux, karpv1.OSWindows, true},
		{"template label", "team", "web", "db", true},
	}
	var cases []scenario
	add := func(name string, mutate func(*corev1.Pod), check func(*testing.T, *solver.Result)) {
		cases = append(cases, scenario{name: name, in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", mutate),
			NodePools: []solver.NodePool{scenarioPool()}}, check: check})
	}
	expr := func(k string, op corev1.NodeSelectorOperator, vals ...string) func(*corev1.Pod) {
		return nodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: k, Operator: op, Values: vals}}})
	}
	for _, k := range keys {
		add("node selector on "+k.name+" narrows the claim to it", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k.key: k.valid} },
			wantClaimKey(k.key, []string{k.valid}, k.invalid))
		add("node selector on an unknown "+k.name+" is unschedulable", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k.key: k.invalid} },
			wantUnschedulable(1, ""))
		add("affinity In on "+k.name+" narrows the claim to it", expr(k.key, corev1.NodeSelectorOpIn, k.valid), wantClaimKey(k.key, []string{k.valid}, k.invalid))
		add("affinity In on an unknown "+k.name+" is unschedulable", expr(k.key, corev1.NodeSelectorOpIn, k.invalid), wantUnschedulable(1, ""))
		add("affinity In on a known and an unknown "+k.name+" keeps the known", expr(k.key, corev1.NodeSelectorOpIn, k.valid, k.invalid),
			wantClaimKey(k.key, []string{k.valid}))
		if k.key != "team" && k.key != karpv1.OSLabelKey {
			add("affinity NotIn on "+k.name+" excludes it", expr(k.key, corev1.NodeSelectorOpNotIn, k.valid), wantClaimKey(k.key, nil, k.valid))
		} else {
			add("affinity NotIn on the only "+k.name+" is unschedulable", expr(k.key, corev1.NodeSelectorOpNotIn, k.valid), wantUnschedulable(1, ""))
		}
		add("affinity NotIn on an unknown "+k.name+" changes nothing", expr(k.key, corev1.NodeSelectorOpNotIn, k.invalid), wantClaims(1))
		add("affinity Exists on "+k.name+" is satisfied", expr(k.key, corev1.NodeSelectorOpExists), wantClaims(1))
		add("affinity DoesNotExist on "+k.name+" is unschedulable", expr(k.key, corev1.NodeSelectorOpDoesNotExist), wantUnschedulable(1, ""))
	}
	add("affinity DoesNotExist on a label no machine has is satisfied", expr("example.com/absent", corev1.NodeSelectorOpDoesNotExist), wantClaims(1))
	add("affinity Exists on a label no machine has is unschedulable", expr("example.com/absent", corev1.NodeSelectorOpExists), wantUnschedulable(1, ""))
	add("node selector on a label no pool sets is unschedulable", func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{"example.com/x": "y"} },
		wantUnschedulable(1, `label "example.com/x"`))
	add("ORed terms take the satisfiable one", nodeAffinity(
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in(zoneKey, "test-zone-9")}},
		corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in(zoneKey, "test-zone-1")}}),
		wantClaimKey(zoneKey, []string{"test-zone-1"}, "test-zone-9"))
	add("expressions of one term are ANDed", nodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		in(zoneKey, "test-zone-1", "test-zone-2"), {Key: zoneKey, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"test-zone-1"}}}}),
		wantClaimKey(zoneKey, []string{"test-zone-2"}, "test-zone-1"))
	add("node selector and affinity are ANDed", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64}
		expr(zoneKey, corev1.NodeSelectorOpIn, "test-zone-1")(p)
	}, all(wantClaimKey(zoneKey, []string{"test-zone-1"}, "test-zone-2"), wantEveryCandidate("arm64", func(it *cloudprovider.InstanceType) bool {
		return typeLabel(it, karpv1.ArchLabelKey) == karpv1.ArchitectureArm64
	})))
	add("spot in the on-demand-only zone is unschedulable", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{zoneKey: "test-zone-3", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot}
	}, wantUnschedulable(1, ""))
	add("on-demand in the on-demand-only zone is placed", func(p *corev1.Pod) {
		p.Spec.NodeSelector = map[string]string{zoneKey: "test-zone-3", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand}
	}, wantClaimKey(zoneKey, []string{"test-zone-3"}))
	runScenarios(t, cases)
}

// --- family: numeric operators ---

func TestScenariosNumericOperators(t *testing.T) {
	const k = "karpenter.k8s.aws/instance-cpu"
	podOp := func(op corev1.NodeSelectorOperator, v string) func(*corev1.Pod) {
		return nodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: k, Operator: op, Values: []string{v}}}})
	}
	poolOp := func(reqs ...requirements.Requirement) solver.NodePool {
		p := scenarioPool()
		for _, r := range reqs {
			p.Requirements.Add(r)
		}
		return p
	}
	cpuRange := func(lo, hi int) func(*testing.T, *solver.Result) {
		return wantEveryCandidate(fmt.Sprintf("of %d–%d CPU", lo, hi), func(it *cloudprovider.InstanceType) bool { return cpus(it) >= lo && cpus(it) <= hi })
	}
	one := func(name string, mutate func(*corev1.Pod), pool solver.NodePool, check func(*testing.T, *solver.Result)) scenario {
		return scenario{name: name, in: solver.Input{Pods: pods(1, "p", "100m", "128Mi", mutate), NodePools: []solver.NodePool{pool}}, check: check}
	}
	runScenarios(t, []scenario{
		one("pod Gt keeps larger types", podOp(corev1.NodeSelectorOpGt, "3"), scenarioPool(), cpuRange(4, 8)),
		one("pod Lt keeps smaller types", podOp(corev1.NodeSelectorOpLt, "3"), scenarioPool(), cpuRange(1, 2)),
		one("pod Gt above every type is unschedulable", podOp(corev1.NodeSelectorOpGt, "8"), scenarioPool(), wantUnschedulable(1, "")),
		one("pod Lt below every type is unschedulable", podOp(corev1.NodeSelectorOpLt, "1"), scenarioPool(), wantUnschedulable(1, "")),
		one("pod Gt and Lt together bound both sides", func(p *corev1.Pod) {
			nodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: k, Operator: corev1.NodeSelectorOpGt, Values: []string{"3"}}, {Key: k, Operator: corev1.NodeSelectorOpLt, Values: []string{"6"}}}})(p)
		}, scenarioPool(), cpuRange(4, 5)),
		one("pool Gte includes its bound", nil, poolOp(requirements.MustNew(k, requirements.Gte, "4")), cpuRange(4, 8)),
		one("pool Lte includes its bound", nil, poolOp(requirements.MustNew(k, requirements.Lte, "2")), cpuRange(1, 2)),
		one("pool Gte and Lte on one value pin it", nil, poolOp(requirements.MustNew(k, requirements.Gte, "5"), requirements.MustNew(k, requirements.Lte, "5")), cpuRange(5, 5)),
		one("pool Gt and pod Lt intersect", podOp(corev1.NodeSelectorOpLt, "5"), poolOp(requirements.MustNew(k, requirements.Gt, "2")), cpuRange(3, 4)),
		one("pool Gt and pod Lt that do not meet are unschedulable", podOp(corev1.NodeSelectorOpLt, "3"), poolOp(requirements.MustNew(k, requirements.Gt, "4")),
			wantUnschedulable(1, "")),
	})
}

// --- family: taints and tolerations ---

func TestScenariosTaintsAndTolerations(t *testing.T) {
	effects := []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule}
	type tol struct {
		name     string
		t        []corev1.Toleration
		tolerant bool
	}
	tols := func(e corev1.TaintEffect) []tol {
		other := corev1.TaintEffectNoExecute
		if e == corev1.TaintEffectNoExecute {
			other = corev1.TaintEffectNoSchedule
		}
		return []tol{
			{"no toleration", nil, false},
			{"Equal with the value", []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "db", Effect: e}}, true},
			{"Equal with another value", []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "web", Effect: e}}, false},
			{"Exists on the key", []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, true},
			{"Exists on every key", []corev1.Toleration{{Operator: corev1.TolerationOpExists}}, true},
			{"Exists on another key", []corev1.Toleration{{Key: "other", Operator: corev1.TolerationOpExists}}, false},
			{"the other effect only", []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists, Effect: other}}, false},
		}
	}
	var cases []scenario
	for _, e := range effects {
		for _, tl := range tols(e) {
			pool := scenarioPool()
			pool.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: e}}
			check := wantClaims(1)
			switch {
			case e == corev1.TaintEffectPreferNoSchedule:
				// A preference: the pod may still go there, as the kube-scheduler would place it.
			case !tl.tolerant:
				check = wantUnschedulable(1, "taint")
			}
			verb := "tolerates"
			if !tl.tolerant {
				verb = "does not tolerate"
			}
			tlc := tl
			cases = append(cases, scenario{name: fmt.Sprintf("%s taint, %s: %s", e, tl.name, verb),
				in:    solver.Input{Pods: pods(1, "p", "500m", "512Mi", func(p *corev1.Pod) { p.Spec.Tolerations = tlc.t }), NodePools: []solver.NodePool{pool}},
				check: check})
		}
	}
	// PreferNoSchedule is avoided when another pool is free of it.
	tainted := scenarioPool()
	tainted.Name, tainted.Taints = "soft", []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectPreferNoSchedule}}
	clean := scenarioPool()
	clean.Name = "clean"
	cases = append(cases, scenario{name: "PreferNoSchedule pool is avoided while a clean pool fits",
		in: solver.Input{Pods: pods(1, "p", "500m", "512Mi", nil), NodePools: []solver.NodePool{tainted, clean}},
		check: func(t *testing.T, r *solver.Result) {
			wantClaims(1)(t, r)
			if r.NodeClaims[0].NodePool != "clean" {
				t.Fatalf("planned on pool %s", r.NodeClaims[0].NodePool)
			}
		}})
	startup := scenarioPool()
	startup.StartupTaints = []corev1.Taint{{Key: "agent-not-ready", Effect: corev1.TaintEffectNoSchedule}}
	cases = append(cases, scenario{name: "startup taints need no toleration",
		in: solver.Input{Pods: pods(2, "p", "500m", "512Mi", nil), NodePools: []solver.NodePool{startup}}, check: wantClaims(1)})
	runScenarios(t, cases)
}

func resourceQuantity(n int64) *resource.Quantity { return resource.NewQuantity(n, resource.DecimalSI) }
