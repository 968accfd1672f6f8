package solver_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

func spread(key string, maxSkew int32, when corev1.UnsatisfiableConstraintAction, app string, mutate ...func(*corev1.TopologySpreadConstraint)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		c := corev1.TopologySpreadConstraint{MaxSkew: maxSkew, TopologyKey: key, WhenUnsatisfiable: when, LabelSelector: appSelector(app)}
		for _, m := range mutate {
			m(&c)
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
}

// domainCounts counts the planned pods (new claims and bindings to nodes with the label) per
// value of key.
func domainCounts(r *solver.Result, key string, nodes []solver.ExistingNode) map[string]int {
	out := map[string]int{}
	for _, nc := range r.NodeClaims {
		v := nc.Requirements.Labels()[key]
		if key == corev1.LabelHostname {
			v = fmt.Sprintf("claim-%p", nc)
		}
		out[v] += len(nc.Pods)
	}
	for _, b := range r.Bindings {
		for _, n := range nodes {
			if n.Name == b.Node {
				out[n.Labels[key]]++
			}
		}
	}
	return out
}

// wantSkew checks the pods land on exactly `domains` values of key, within skew of each other.
func wantSkew(key string, domains, skew int) func(*testing.T, *solver.Result) {
	return func(t *testing.T, r *solver.Result) {
		t.Helper()
		wantAllPlaced(t, r)
		counts := domainCounts(r, key, nil)
		if len(counts) != domains {
			t.Fatalf("pods in %d %s domains %v, want %d", len(counts), key, counts, domains)
		}
		lo, hi := 1<<30, 0
		for _, n := range counts {
			lo, hi = min(lo, n), max(hi, n)
		}
		if hi-lo > skew {
			t.Fatalf("counts %v skew %d > %d", counts, hi-lo, skew)
		}
	}
}

func withLabels(kv ...string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func chain(ms ...func(*corev1.Pod)) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		for _, m := range ms {
			if m != nil {
				m(p)
			}
		}
	}
}

func TestScenariosTopologySpread(t *testing.T) {
	dns := corev1.DoNotSchedule
	one := func(name string, ps []*corev1.Pod, check func(*testing.T, *solver.Result)) scenario {
		return scenario{name: name, in: solver.Input{Pods: ps, NodePools: []solver.NodePool{scenarioPool()}}, check: check}
	}
	var cases []scenario
	for _, n := range []int{2, 3, 4, 6, 7, 9} {
		cases = append(cases, one(fmt.Sprintf("zone spread maxSkew 1 balances %d pods over the three zones", n),
			pods(n, "web", "500m", "512Mi", spread(zoneKey, 1, dns, "web")), wantSkew(zoneKey, min(n, 3), 1)))
	}
	for _, n := range []int{2, 3, 5} {
		cases = append(cases, one(fmt.Sprintf("hostname spread maxSkew 1 puts %d pods on %d machines", n, n),
			pods(n, "web", "500m", "512Mi", spread(corev1.LabelHostname, 1, dns, "web")), wantClaims(n)))
	}
	cases = append(cases,
		one("zone spread maxSkew 2 still uses every zone for 6 pods", pods(6, "web", "500m", "512Mi", spread(zoneKey, 2, dns, "web")),
			func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				counts := domainCounts(r, zoneKey, nil)
				lo, hi := 100, 0
				for _, n := range counts {
					lo, hi = min(lo, n), max(hi, n)
				}
				if len(counts) < 2 || (len(counts) == 3 && hi-lo > 2) || (len(counts) == 2 && hi > 2) {
					t.Fatalf("counts %v break maxSkew 2", counts)
				}
			}),
		one("capacity-type spread uses spot and on-demand", pods(4, "web", "500m", "512Mi", spread(karpv1.CapacityTypeLabelKey, 1, dns, "web")),
			wantSkew(karpv1.CapacityTypeLabelKey, 2, 1)),
		one("ScheduleAnyway spread still places every pod", pods(5, "web", "500m", "512Mi", spread(zoneKey, 1, corev1.ScheduleAnyway, "web")), wantClaims1OrMore),
		one("spread counts only pods its selector matches", append(pods(3, "web", "500m", "512Mi", spread(zoneKey, 1, dns, "web")),
			pods(3, "other", "500m", "512Mi", nil)...), func(t *testing.T, r *solver.Result) {
			wantAllPlaced(t, r)
			webs := map[string]int{}
			for _, nc := range r.NodeClaims {
				for _, p := range nc.Pods {
					if p.Labels["app"] == "web" {
						webs[zoneOf(nc)]++
					}
				}
			}
			if len(webs) != 3 {
				t.Fatalf("web pods in zones %v, want one per zone", webs)
			}
		}),
		one("minDomains 3 with 3 zones places three pods one per zone", pods(3, "web", "500m", "512Mi",
			spread(zoneKey, 1, dns, "web", func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr32(3) })), wantSkew(zoneKey, 3, 0)),
		one("minDomains above the zones there are caps each zone at maxSkew", pods(4, "web", "500m", "512Mi",
			spread(zoneKey, 1, dns, "web", func(c *corev1.TopologySpreadConstraint) { c.MinDomains = ptr32(5) })), func(t *testing.T, r *solver.Result) {
			placed := 0
			for _, nc := range r.NodeClaims {
				placed += len(nc.Pods)
			}
			if placed != 3 || len(r.Unschedulable) != 1 {
				t.Fatalf("%d placed, %d unschedulable; want one pod per zone and the fourth pending", placed, len(r.Unschedulable))
			}
		}),
		one("zone spread with a zone selector uses only the selected zones under Honor", pods(4, "web", "500m", "512Mi", chain(
			spread(zoneKey, 1, dns, "web"), nodeAffinity(corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{in(zoneKey, "test-zone-1", "test-zone-2")}}))),
			wantSkew(zoneKey, 2, 0)),
		one("spot-only pods spread over the two zones that sell spot", pods(4, "web", "500m", "512Mi", chain(
			spread(zoneKey, 1, dns, "web"), func(p *corev1.Pod) {
				p.Spec.NodeSelector = map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot}
			})),
			wantSkew(zoneKey, 2, 0)),
		one("two spreads on zone and hostname hold together", pods(6, "web", "500m", "512Mi", chain(
			spread(zoneKey, 1, dns, "web"), spread(corev1.LabelHostname, 1, dns, "web"))), all(wantSkew(zoneKey, 3, 0), wantClaims(6))),
	)
	// Existing pods count towards the skew.
	existing := []solver.ExistingNode{node("n-a", "test-zone-1", "16", pods(3, "old", "100m", "128Mi", withLabels("app", "web"))...)}
	cases = append(cases, scenario{name: "existing pods in a zone push new ones to the others",
		in: solver.Input{Pods: pods(3, "web", "500m", "512Mi", spread(zoneKey, 1, dns, "web")), NodePools: []solver.NodePool{scenarioPool()}, Nodes: existing},
		check: func(t *testing.T, r *solver.Result) {
			wantAllPlaced(t, r)
			for _, nc := range r.NodeClaims {
				if zoneOf(nc) == "test-zone-1" {
					t.Fatal("a new pod went to the zone that already has three")
				}
			}
			if len(r.Bindings) != 0 {
				t.Fatal("a new pod was bound to the crowded zone's node")
			}
		}})
	runScenarios(t, cases)
}

func wantClaims1OrMore(t *testing.T, r *solver.Result) {
	t.Helper()
	wantAllPlaced(t, r)
	if len(r.NodeClaims) == 0 {
		t.Fatal("no claim")
	}
}

func ptr32(v int32) *int32 { return &v }

func podAffinityTerm(key, app string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: appSelector(app)}
}

func antiAffinity(key, app string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{podAffinityTerm(key, app)}}
	}
}

func affinity(key, app string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{podAffinityTerm(key, app)}}
	}
}

func preferAnti(key, app string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
			{Weight: 100, PodAffinityTerm: podAffinityTerm(key, app)}}}
	}
}

func TestScenariosPodAffinity(t *testing.T) {
	pool := func() []solver.NodePool { return []solver.NodePool{scenarioPool()} }
	db := pods(1, "db", "100m", "128Mi", nil)
	dbNode := []solver.ExistingNode{node("db-node", "test-zone-2", "1", db...)}
	cases := []scenario{
		{name: "zone anti-affinity places three pods in three zones", in: solver.Input{Pods: pods(3, "web", "500m", "512Mi", antiAffinity(zoneKey, "web")), NodePools: pool()},
			check: wantSkew(zoneKey, 3, 0)},
		{name: "zone anti-affinity leaves a fourth pod pending", in: solver.Input{Pods: pods(4, "web", "500m", "512Mi", antiAffinity(zoneKey, "web")), NodePools: pool()},
			check: wantUnschedulable(1, "")},
		{name: "hostname anti-affinity gives each pod its own machine", in: solver.Input{Pods: pods(4, "web", "500m", "512Mi", antiAffinity(corev1.LabelHostname, "web")), NodePools: pool()},
			check: wantClaims(4)},
		{name: "hostname anti-affinity against another app keeps them apart", in: solver.Input{Pods: append(pods(2, "web", "500m", "512Mi", antiAffinity(corev1.LabelHostname, "cache")),
			pods(2, "cache", "500m", "512Mi", nil)...), NodePools: pool()},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				for _, nc := range r.NodeClaims {
					apps := map[string]bool{}
					for _, p := range nc.Pods {
						apps[p.Labels["app"]] = true
					}
					if apps["web"] && apps["cache"] {
						t.Fatal("web and cache share a machine")
					}
				}
			}},
		{name: "zone affinity to an existing pod follows it to its zone", in: solver.Input{Pods: pods(2, "web", "2", "512Mi", affinity(zoneKey, "db")), NodePools: pool(), Nodes: dbNode},
			check: wantClaimKey(zoneKey, []string{"test-zone-2"}, "test-zone-1", "test-zone-3")},
		{name: "hostname affinity to an existing pod binds to its node", in: solver.Input{Pods: pods(1, "web", "200m", "128Mi", affinity(corev1.LabelHostname, "db")), NodePools: pool(),
			Nodes: []solver.ExistingNode{node("db-node", "test-zone-2", "4", db...)}},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				if len(r.Bindings) != 1 || r.Bindings[0].Node != "db-node" {
					t.Fatalf("bindings %v, want the pod on db-node", r.Bindings)
				}
			}},
		{name: "hostname affinity to a pod on a full node is unschedulable", in: solver.Input{Pods: pods(1, "web", "2", "128Mi", affinity(corev1.LabelHostname, "db")), NodePools: pool(), Nodes: dbNode},
			check: wantUnschedulable(1, "")},
		{name: "affinity to a pod that exists nowhere is unschedulable", in: solver.Input{Pods: pods(1, "web", "500m", "128Mi", affinity(zoneKey, "ghost")), NodePools: pool()},
			check: wantUnschedulable(1, "")},
		{name: "self affinity lets the first pod choose and the rest follow", in: solver.Input{Pods: pods(4, "web", "500m", "512Mi", affinity(zoneKey, "web")), NodePools: pool()},
			check: wantSkew(zoneKey, 1, 100)},
		{name: "hostname self affinity puts every pod on one machine", in: solver.Input{Pods: pods(4, "web", "500m", "512Mi", affinity(corev1.LabelHostname, "web")), NodePools: pool()},
			check: wantClaims(1)},
		{name: "preferred anti-affinity spreads when it can", in: solver.Input{Pods: pods(3, "web", "500m", "512Mi", preferAnti(corev1.LabelHostname, "web")), NodePools: pool()},
			check: wantClaims(3)},
		{name: "preferred zone anti-affinity is relaxed for a fourth pod", in: solver.Input{Pods: pods(4, "web", "500m", "512Mi", preferAnti(zoneKey, "web")), NodePools: pool()},
			check: wantClaims1OrMore},
		{name: "anti-affinity of an existing pod keeps new matching pods out of its zone", in: solver.Input{
			Pods: pods(2, "web", "500m", "512Mi", nil), NodePools: pool(),
			Nodes: []solver.ExistingNode{node("guard", "test-zone-1", "8", pods(1, "guard", "100m", "128Mi", antiAffinity(zoneKey, "web"))...)}},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				if len(r.Bindings) > 0 {
					t.Fatal("a web pod was bound next to the guard")
				}
				for _, nc := range r.NodeClaims {
					if z := zoneOf(nc); z == "test-zone-1" {
						t.Fatal("a web pod was planned into the guarded zone")
					}
				}
			}},
		{name: "anti-affinity in another namespace does not apply", in: solver.Input{Pods: pods(2, "web", "500m", "512Mi", func(p *corev1.Pod) {
			p.Namespace = "other"
			antiAffinity(corev1.LabelHostname, "cache")(p)
		}), NodePools: pool(), Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "8", pods(1, "cache", "100m", "128Mi", nil)...)}},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				if len(r.Bindings) != 2 {
					t.Fatalf("%d bindings: the cache pod in namespace default should not repel pods of namespace other", len(r.Bindings))
				}
			}},
		{name: "namespace selector extends anti-affinity to every namespace", in: solver.Input{Pods: pods(1, "web", "500m", "512Mi", func(p *corev1.Pod) {
			p.Namespace = "other"
			antiAffinity(corev1.LabelHostname, "cache")(p)
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].NamespaceSelector = &metav1.LabelSelector{}
		}), NodePools: pool(), Nodes: []solver.ExistingNode{node("n1", "test-zone-1", "8", pods(1, "cache", "100m", "128Mi", nil)...)}},
			check: func(t *testing.T, r *solver.Result) {
				wantAllPlaced(t, r)
				if len(r.Bindings) != 0 {
					t.Fatal("an empty namespace selector should match the cache pod's namespace")
				}
			}},
	}
	runScenarios(t, cases)
}

// A pod on an in-flight claim whose zone is not decided yet (several allowed) bars a required zone
// anti-affinity in every zone it may land in: a pod placed in one of them could be broken by the
// launch. Once the claim's zone is known, only that zone is barred.
func TestAntiAffinityTowardsAnUndecidedClaimAvoidsEveryZoneItMayTake(t *testing.T) {
	db := workload.Pod("db", "500m", "512Mi", map[string]string{"app": "db"})
	inflight := solver.ExistingNode{Name: "nodeclaim/x", Labels: map[string]string{corev1.LabelHostname: "x"},
		Undecided:   map[string][]string{zoneKey: {"test-zone-1", "test-zone-2"}},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("40")},
		Pods:        []*corev1.Pod{db}}
	web := workload.Pod("web", "500m", "512Mi", map[string]string{"app": "web"})
	web.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: zoneKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}}}
	in := solver.Input{Pods: []*corev1.Pod{web}, Nodes: []solver.ExistingNode{inflight}, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(4))}}
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 1 || zoneOf(r.NodeClaims[0]) != "test-zone-3" {
		t.Fatalf("claims %d, zone %q: want web in test-zone-3, the one zone db cannot land in", len(r.NodeClaims), zoneOf(r.NodeClaims[0]))
	}
	// The symmetric case: db's own anti-affinity bars web from every zone db may land in.
	db2 := db.DeepCopy()
	db2.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		TopologyKey: zoneKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
	inflight.Pods = []*corev1.Pod{db2}
	plain := workload.Pod("web", "500m", "512Mi", map[string]string{"app": "web"})
	r = solve(t, solver.Input{Pods: []*corev1.Pod{plain}, Nodes: []solver.ExistingNode{inflight}, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(4))}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 1 || zoneOf(r.NodeClaims[0]) != "test-zone-3" {
		t.Fatalf("symmetric: zone %q, want test-zone-3", zoneOf(r.NodeClaims[0]))
	}
}

// A pod whose node affinity rejects one of the instance types an in-flight claim may still launch
// as does not go there (the launch may pick it); a pod that accepts them all does.
func TestAffinityMustAcceptEveryTypeAnInFlightClaimMayTake(t *testing.T) {
	notIn := func(name string, vals ...string) *corev1.Pod {
		p := workload.Pod(name, "500m", "512Mi", map[string]string{"app": name})
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelInstanceTypeStable, Operator: corev1.NodeSelectorOpNotIn, Values: vals}}}}}}}
		return p
	}
	inflight := solver.ExistingNode{Name: "nodeclaim/x", Labels: map[string]string{corev1.LabelHostname: "x"},
		Undecided:   map[string][]string{corev1.LabelInstanceTypeStable: {"fake-it-2", "fake-it-3"}},
		Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("4Gi"), corev1.ResourcePods: resource.MustParse("40")}}
	for _, c := range []struct {
		pod  *corev1.Pod
		bind bool
	}{
		{notIn("rejects-one", "fake-it-3"), false},
		{notIn("rejects-none", "fake-it-5"), true},
	} {
		r := solve(t, solver.Input{Pods: []*corev1.Pod{c.pod}, Nodes: []solver.ExistingNode{inflight}, NodePools: []solver.NodePool{poolOf(workload.FakeInstanceTypes(4))}}, solver.Options{})
		wantAllPlaced(t, r)
		if bound := len(r.Bindings) == 1 && r.Bindings[0].Node == "nodeclaim/x"; bound != c.bind {
			t.Errorf("%s: bound to the in-flight claim %v, want %v", c.pod.Name, bound, c.bind)
		}
	}
}

// Pods that require each other's zone (pod affinity, zone topology) but select instance types no
// one machine has for all of them: kube-scheduler places them on several machines of one zone, so
// the plan buys those machines, all in one zone, and leaves none pending. (An independent suite
// of Karpenter's scheduling cases reported one of two such pods left pending.)
func TestZoneAffinityAcrossMachinesOfDifferentTypes(t *testing.T) {
	its := workload.FakeInstanceTypes(6)
	var ps []*corev1.Pod
	for i := range 6 {
		p := workload.Pod(fmt.Sprintf("db-%d", i), "500m", "512Mi", map[string]string{"app": "db"})
		p.Spec.Affinity = &corev1.Affinity{
			NodeAffinity: instanceTypes(corev1.NodeSelectorOpIn, []string{its[2+i%2].Name}),
			PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: zoneKey, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}}}
		ps = append(ps, p)
	}
	r := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{poolOf(its)}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) < 2 {
		t.Fatalf("%d claims, want at least two: the pods select two instance types", len(r.NodeClaims))
	}
	zones := map[string]bool{}
	for _, nc := range r.NodeClaims {
		zones[zoneOf(nc)] = true
	}
	if len(zones) != 1 || zones[""] {
		t.Errorf("claims in zones %v, want one decided zone for all", zones)
	}
}
