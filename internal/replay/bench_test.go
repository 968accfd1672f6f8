package replay_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/replay"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// fragmented builds a cluster of pods packed onto machines, then removes 40% of the pods at
// random: the state consolidation is for.
func fragmented(b *testing.B, policy karpv1.ConsolidationPolicy, pods int) *replay.Cluster {
	return fragmentedT(b, policy, pods)
}

func fragmentedT(b testing.TB, policy karpv1.ConsolidationPolicy, pods int) *replay.Cluster {
	b.Helper()
	np := onDemandPool(policy)
	np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "100%"}}
	c, err := replay.New(replay.Config{NodePool: np, InstanceTypes: simCatalog(b), DisableDisruption: true, LaunchDelay: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	sizes := []struct{ cpu, mem string }{{"250m", "512Mi"}, {"500m", "1Gi"}, {"1", "2Gi"}, {"1500m", "1Gi"}, {"2", "4Gi"}}
	var deps []replay.Deployment
	for i, s := range sizes {
		deps = append(deps, replay.Deployment{Name: fmt.Sprintf("app-%d", i), CPU: s.cpu, Memory: s.mem, Replicas: constant(pods / len(sizes))})
	}
	c.Run(deps, 30*time.Second)
	c.RemoveRandom(0.4, rand.New(rand.NewPCG(42, 42)))
	// Let every node's consolidateAfter pass, and take the nodes left empty away: emptiness
	// needs no search, the round measured is the consolidation after it.
	c.Run(nil, time.Minute)
	for {
		dec := disruptionplan.Decide(c.Snapshot(), disruptionplan.Options{})
		if dec.Command == nil || dec.Command.Method != disruptionplan.MethodEmptiness {
			break
		}
		c.Apply(dec.Command)
	}
	return c
}

// fleet is the cluster's machines as floorAtEvictions sees them.
type fleet struct {
	nodes []node
	// demand is the CPU (cores) the reschedulable pods request; perCPU the least any offering
	// of the pool's catalog asks per allocatable core.
	demand, perCPU float64
	// The shape is the largest reschedulable pods' (their CPU, the least memory any of them
	// asks): each such pod needs a machine with a shape's room free; perShape is the least any
	// offering asks per shape it holds (0 leaves shapes out).
	perShape float64
}

// node is a machine: its price, the pods disrupting it evicts, and the cores it offers them
// (allocatable less what its other pods request); of its evicted pods, big are of the fleet's
// shape or larger, and room is how many pods of that shape its free room holds.
type node struct {
	price     float64
	pods      int
	cpu       float64
	big, room int
	// moving is the cores its evicted pods ask.
	moving float64
}

// evictable describes the cluster's machines, as snap has them, for floorAtEvictions.
func evictable(c *replay.Cluster, snap *disruptionplan.Snapshot, catalog []*cloudprovider.InstanceType) fleet {
	var f fleet
	price := map[string]float64{}
	for _, m := range c.Machines() {
		price[m.Name] = m.Price
	}
	// The shape: the most CPU a reschedulable pod asks, with the least memory of those asking it.
	var shapeCPU, shapeMem float64
	for _, n := range snap.Nodes {
		for _, p := range n.Pods {
			if !pods.Reschedulable(p) {
				continue
			}
			r := solver.Requests([]*corev1.Pod{p})
			switch cpu, mem := cores(r), r.Memory().AsApproximateFloat64(); {
			case cpu > shapeCPU:
				shapeCPU, shapeMem = cpu, mem
			case cpu == shapeCPU:
				shapeMem = math.Min(shapeMem, mem)
			}
		}
	}
	for _, n := range snap.Nodes {
		var moving, staying []*corev1.Pod
		big := 0
		for _, p := range n.Pods {
			if pods.Reschedulable(p) {
				moving = append(moving, p)
				if r := solver.Requests([]*corev1.Pod{p}); cores(r) >= shapeCPU && r.Memory().AsApproximateFloat64() >= shapeMem {
					big++
				}
			} else {
				staying = append(staying, p)
			}
		}
		alloc, used := n.Node.Status.Allocatable, solver.Requests(n.Pods)
		room := 0
		if shapeCPU > 0 && shapeMem > 0 {
			room = int(math.Min(math.Min((alloc.Cpu().AsApproximateFloat64()-cores(used))/shapeCPU,
				(alloc.Memory().AsApproximateFloat64()-used.Memory().AsApproximateFloat64())/shapeMem),
				float64(alloc.Pods().Value()-int64(len(n.Pods)))))
		}
		offered := alloc.Cpu().AsApproximateFloat64() - cores(solver.Requests(staying))
		f.nodes = append(f.nodes, node{price: price[n.Name()], pods: len(moving), cpu: offered, big: big, room: max(room, 0),
			moving: cores(solver.Requests(moving))})
		f.demand += cores(solver.Requests(moving))
	}
	f.perCPU = math.Inf(1)
	perShape := math.Inf(1)
	for _, it := range catalog {
		cpu, _ := it.AllocatableOf(corev1.ResourceCPU)
		mem, _ := it.AllocatableOf(corev1.ResourceMemory)
		maxPods, _ := it.AllocatableOf(corev1.ResourcePods)
		shapes := 0.0
		if shapeCPU > 0 && shapeMem > 0 {
			shapes = math.Floor(math.Min(math.Min(cpu.AsApproximateFloat64()/shapeCPU, mem.AsApproximateFloat64()/shapeMem), float64(maxPods.Value())))
		}
		for _, o := range it.Offerings {
			if o.Available && cpu.Sign() > 0 {
				f.perCPU = math.Min(f.perCPU, o.Price/cpu.AsApproximateFloat64())
			}
			if o.Available && shapes >= 1 {
				perShape = math.Min(perShape, o.Price/shapes)
			}
		}
	}
	if !math.IsInf(perShape, 1) {
		f.perShape = perShape
	}
	return f
}

// cores is a resource list's CPU.
func cores(rl corev1.ResourceList) float64 { return rl.Cpu().AsApproximateFloat64() }

// floorAtEvictions is the lowest hourly price any consolidation evicting at most max pods can
// leave the fleet at. Every evicted pod is one of a disrupted machine's and every disrupted
// machine goes, so a consolidation removes a set S of machines whose pods number max or fewer,
// and buys at least the cores S offered beyond the fleet's spare ones, at perCPU or dearer, and
// room for S's big pods beyond the shapes the machines that stay have room for, at perShape or
// dearer a pod. Paying at least the larger of the two, S saves at most
// price(S) − θ·perCPU·(cpu(S) − spare) − φ·perShape·(big(S) + room(S) − room) for any
// θ, φ ≥ 0 with θ + φ ≤ 1: a 0/1 knapsack on the pods for each (θ, φ), the least of whose answers
// bounds every S. Packing is otherwise ignored (small pods fit wherever cores are), so the floor
// may be out of reach; a target price below it cannot be met within max evictions. It is the
// higher of that bound and splitFloor's, both holding for every S.
func floorAtEvictions(f fleet, max int) float64 {
	return math.Max(lagrangianFloor(f, max), splitFloor(f, max))
}

// maxSplit bounds the machines splitFloor enumerates the subsets of.
const maxSplit = 20

// splitFloor bounds the same consolidations another way, when at most maxSplit machines have room
// for the shape or hold pods of it (the shape's machines; the others hold only smaller pods and
// have no room for one): it tries every set B of the shape's machines, charging B's removal the
// larger of the price of the big pods' room beyond the room of the shape's machines left, and of
// the cores its pods need beyond what every other machine has free; the rest of the evictions go to
// the other machines, each counted as saving its whole price. −Inf when it does not apply.
func splitFloor(f fleet, max int) float64 {
	var shaped, rest []node
	total, free, rooms := 0.0, 0.0, 0
	for _, n := range f.nodes {
		total += n.price
		free += n.cpu - n.moving
		if n.big > 0 || n.room > 0 {
			shaped = append(shaped, n)
			rooms += n.room
		} else {
			rest = append(rest, n)
		}
	}
	if f.perShape == 0 || len(shaped) > maxSplit {
		return math.Inf(-1)
	}
	others := make([]float64, max+1) // others[e]: the most price removable from the rest evicting at most e
	for _, n := range rest {
		for e := max; e >= n.pods && n.price > 0; e-- {
			others[e] = math.Max(others[e], others[e-n.pods]+n.price)
		}
	}
	saving := 0.0
	for set := range 1 << len(shaped) {
		pods, big, room := 0, 0, rooms
		price, moving, freed := 0.0, 0.0, 0.0
		for i, n := range shaped {
			if set&(1<<i) != 0 {
				pods, big, room = pods+n.pods, big+n.big, room-n.room
				price, moving, freed = price+n.price, moving+n.moving, freed+n.cpu-n.moving
			}
		}
		if pods > max {
			continue
		}
		bought := math.Max(0, math.Max(f.perShape*float64(big-room), f.perCPU*(moving-(free-freed))))
		saving = math.Max(saving, price-bought+others[max-pods])
	}
	return total - saving
}

// lagrangianFloor is floorAtEvictions' first bound.
func lagrangianFloor(f fleet, max int) float64 {
	total, spare, rooms := 0.0, -f.demand, 0
	for _, n := range f.nodes {
		total += n.price
		spare += n.cpu
		rooms += n.room
	}
	saving := math.Inf(1)
	for step := 0; step <= 20; step++ {
		for shaped := 0; step+shaped <= 20; shaped++ {
			if shaped > 0 && f.perShape == 0 {
				break
			}
			theta, phi := float64(step)/20, float64(shaped)/20
			best := make([]float64, max+1) // best[e]: the most value removable evicting at most e pods
			for _, n := range f.nodes {
				v := n.price - theta*f.perCPU*n.cpu - phi*f.perShape*float64(n.big+n.room)
				if v <= 0 {
					continue
				}
				for e := max; e >= n.pods; e-- {
					best[e] = math.Max(best[e], best[e-n.pods]+v)
				}
			}
			saving = math.Min(saving, best[max]+theta*f.perCPU*math.Max(spare, 0)+phi*f.perShape*float64(rooms))
		}
	}
	return total - saving
}

// poolCatalog is the catalog as the pool sees it: compatible types, allowed offerings only.
func poolCatalog(b testing.TB, np *karpv1.NodePool) []*cloudprovider.InstanceType {
	reqs, err := nodepools.Requirements(np)
	if err != nil {
		b.Fatal(err)
	}
	ct, _ := reqs.Get(karpv1.CapacityTypeLabelKey)
	var out []*cloudprovider.InstanceType
	for _, it := range simCatalog(b) {
		if it.Requirements.Intersects(reqs) != nil {
			continue
		}
		cp := *it
		cp.Offerings = nil
		for _, o := range it.Offerings {
			if ct.Allows(o.CapacityType) {
				cp.Offerings = append(cp.Offerings, o)
			}
		}
		out = append(out, &cp)
	}
	return out
}

// BenchmarkConsolidationRound times one decision on fragmented clusters and reports what it would
// do: nodes removed, pods evicted, $/h before and after, and the LP bound of the pods left.
func BenchmarkConsolidationRound(b *testing.B) {
	for _, size := range []struct{ pods int }{{5000}, {20000}} {
		for _, policy := range []karpv1.ConsolidationPolicy{karpv1.ConsolidationPolicyWhenEmpty, karpv1.ConsolidationPolicyBalanced, karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized} {
			b.Run(fmt.Sprintf("pods=%d/policy=%s", size.pods, policy), func(b *testing.B) {
				c := fragmented(b, policy, size.pods)
				catalog := poolCatalog(b, onDemandPool(policy))
				snap := c.Snapshot()
				machines := evictable(c, snap, catalog)
				var dec *disruptionplan.Decision
				for b.Loop() {
					dec = disruptionplan.Decide(snap, disruptionplan.Options{})
				}
				b.StopTimer()
				before, nodes := c.Price(), c.Nodes()
				evicted := 0
				if dec.Command != nil {
					evicted = len(dec.Command.Pods())
					c.Apply(dec.Command)
				}
				b.ReportMetric(float64(nodes), "nodes-before")
				b.ReportMetric(float64(nodes-c.Nodes()), "nodes-removed")
				b.ReportMetric(float64(evicted), "pods-evicted")
				b.ReportMetric(before, "$/h-before")
				b.ReportMetric(c.Price(), "$/h-after")
				b.ReportMetric(c.Price()/workload.LPBound(poolCatalog(b, onDemandPool(policy)), c.Pods()), "after/LP")
				b.ReportMetric(c.Price()/workload.FitLPBound(poolCatalog(b, onDemandPool(policy)), c.Pods()), "after/fitLP")
				b.ReportMetric(float64(dec.Solves), "solves")
				if size.pods > 5000 || policy == karpv1.ConsolidationPolicyWhenEmpty {
					return
				}
				// Then rounds, a minute apart, until nothing is left to do; with the churn guard
				// (default) and without it. The yardstick is a fresh plan of the same pods by the
				// solver; the LP bound is loose for this mix (2-CPU pods cannot use the cheapest
				// 2-vCPU types the relaxation buys fractions of), FitLPBound is not.
				settle := func(c *replay.Cluster, machines fleet, opts disruptionplan.Options, label string) {
					rounds, start := 1, time.Now()
					for ; rounds < 500; rounds++ {
						d := disruptionplan.Decide(c.Snapshot(), opts)
						if d.Command == nil && d.Settling == "" {
							break
						}
						if d.Command != nil {
							c.Apply(d.Command)
						}
						c.Run(nil, time.Minute)
					}
					b.ReportMetric(float64(rounds), "rounds-"+label)
					// Every eviction since the cluster was built, the first round's too, and those of
					// pods an earlier round had moved already.
					b.ReportMetric(float64(c.Report().Evictions), "evictions-"+label)
					b.ReportMetric(float64(c.Report().Reevictions), "evictions-twice-"+label)
					b.ReportMetric(time.Since(start).Seconds(), "s-"+label)
					b.ReportMetric(c.Price(), "$/h-"+label)
					// No way of evicting half as many pods ends below this price.
					b.ReportMetric(floorAtEvictions(machines, c.Report().Evictions/2), "floor-$/h-half-evictions-"+label)
					b.ReportMetric(c.Price()/workload.FitLPBound(poolCatalog(b, onDemandPool(policy)), c.Pods()), label+"/fitLP")
					b.ReportMetric(c.Price()/workload.ConfigLPBound(poolCatalog(b, onDemandPool(policy)), c.Pods(), 200), label+"/configLP")
				}
				settle(c, machines, disruptionplan.Options{}, "settled")
				c2 := fragmented(b, policy, size.pods)
				settle(c2, evictable(c2, c2.Snapshot(), catalog), disruptionplan.Options{EvictionMemory: time.Nanosecond}, "settled-noguard")
				np := onDemandPool(policy)
				reqs, err := nodepools.Requirements(np)
				if err != nil {
					b.Fatal(err)
				}
				fresh := solver.Solve(solver.Input{Pods: c2.Pods(), NodePools: []solver.NodePool{{Name: np.Name, Requirements: reqs, InstanceTypes: simCatalog(b)}}}, solver.Options{})
				b.ReportMetric(fresh.Price(), "$/h-fresh-plan")
				b.ReportMetric(fresh.Price()/workload.LPBound(poolCatalog(b, np), c2.Pods()), "fresh/LP")
				b.ReportMetric(fresh.Price()/workload.FitLPBound(poolCatalog(b, np), c2.Pods()), "fresh/fitLP")
				b.ReportMetric(fresh.Price()/workload.ConfigLPBound(poolCatalog(b, np), c2.Pods(), 200), "fresh/configLP")
			})
		}
	}
}

// The floor takes away the dearest machines whose pods fit the evictions allowed: an empty one
// always, then the best mix, not the dearest machine first; it charges for the cores the fleet
// lacks once they are gone, and for the room the largest pods lack.
func TestFloorAtEvictions(t *testing.T) {
	nodes := []node{{price: 7.3, pods: 45}, {price: 7.4, pods: 49}, {price: 1.8, pods: 12}, {price: 0.04, pods: 1}, {price: 0.04, pods: 1},
		{price: 0.04, pods: 1}, {price: 0.5}}
	total := 0.0
	for _, n := range nodes {
		total += n.price
	}
	for _, tc := range []struct {
		max     int
		removed float64
	}{
		{0, 0.5},                       // the empty machine only
		{48, 0.5 + 7.3 + 3*0.04},       // 45 + 1 + 1 + 1
		{50, 0.5 + 7.4 + 0.04},         // 49 + 1: dearer than 45 + 1 + 1 + 1 (7.42)
		{61, 0.5 + 7.3 + 1.8 + 3*0.04}, // 45 + 12 + 1 + 1 + 1: dearer than 49 + 12 (9.2)
		{200, total},                   // everything
	} {
		if got := floorAtEvictions(fleet{nodes: nodes}, tc.max); math.Abs(got-(total-tc.removed)) > 1e-9 {
			t.Errorf("at most %d evictions: floor %.4f, want %.4f", tc.max, got, total-tc.removed)
		}
	}
	// Two machines of 10 cores, pods asking for 10 in all: either may go for free, both only by
	// buying 10 cores (at least 1 $/h).
	two := fleet{nodes: []node{{price: 1, pods: 1, cpu: 10, moving: 5}, {price: 1, pods: 1, cpu: 10, moving: 5}}, demand: 10, perCPU: 0.1}
	for max, want := range map[int]float64{1: 1, 2: 1} {
		if got := floorAtEvictions(two, max); math.Abs(got-want) > 1e-9 {
			t.Errorf("two machines, at most %d evictions: floor %.4f, want %.4f", max, got, want)
		}
	}
	// A 4-core pod on a machine of its own, and 5 cores free on two machines of small pods, 3 and
	// 2: by cores the pod fits for free; by its shape no machine has room, and it buys one (0.4 $/h).
	shaped := fleet{nodes: []node{{price: 1, pods: 1, cpu: 4, big: 1, moving: 4}, {price: 10, pods: 20, cpu: 10, moving: 7},
		{price: 10, pods: 20, cpu: 10, moving: 8}}, demand: 19, perCPU: 0.1}
	for perShape, want := range map[float64]float64{0: 20, 0.4: 20.4} {
		shaped.perShape = perShape
		if got := floorAtEvictions(shaped, 1); math.Abs(got-want) > 1e-9 {
			t.Errorf("a pod of 4 cores with no room of its shape, %g $/h a shape: floor %.4f, want %.4f", perShape, got, want)
		}
	}
	// Two machines of four pods of the shape (2 cores), each with room for two more, and three
	// single-pod machines at 1 $/h: within 5 evictions the best is one shaped machine (two of its
	// pods bought back at 0.2 $/h each) and one small one; within 8 both shaped machines (all
	// eight pods bought back, 1.6 $/h).
	split := fleet{nodes: []node{{price: 5, pods: 4, cpu: 12, big: 4, room: 2, moving: 8}, {price: 5, pods: 4, cpu: 12, big: 4, room: 2, moving: 8},
		{price: 1, pods: 1, cpu: 1, moving: 1}, {price: 1, pods: 1, cpu: 1, moving: 1}, {price: 1, pods: 1, cpu: 1, moving: 1}},
		demand: 19, perCPU: 0.1, perShape: 0.2}
	for max, want := range map[int]float64{3: 13 - 3, 5: 13 - 5.6, 8: 13 - (10 - 1.6)} {
		if got := splitFloor(split, max); math.Abs(got-want) > 1e-9 {
			t.Errorf("split, at most %d evictions: floor %.4f, want %.4f", max, got, want)
		}
	}
}
