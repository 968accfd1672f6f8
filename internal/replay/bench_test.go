package replay_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruption"
	"capstan.dev/capstan/internal/nodepools"
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
		dec := disruption.Decide(c.Snapshot(), disruption.Options{})
		if dec.Command == nil || dec.Command.Method != disruption.MethodEmptiness {
			break
		}
		c.Apply(dec.Command)
	}
	return c
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
				snap := c.Snapshot()
				var dec *disruption.Decision
				for b.Loop() {
					dec = disruption.Decide(snap, disruption.Options{})
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
				settle := func(c *replay.Cluster, opts disruption.Options, label string) {
					rounds, start := 1, time.Now()
					for ; rounds < 500; rounds++ {
						d := disruption.Decide(c.Snapshot(), opts)
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
					b.ReportMetric(c.Price()/workload.FitLPBound(poolCatalog(b, onDemandPool(policy)), c.Pods()), label+"/fitLP")
					b.ReportMetric(c.Price()/workload.ConfigLPBound(poolCatalog(b, onDemandPool(policy)), c.Pods(), 200), label+"/configLP")
				}
				settle(c, disruption.Options{}, "settled")
				c2 := fragmented(b, policy, size.pods)
				settle(c2, disruption.Options{EvictionMemory: time.Nanosecond}, "settled-noguard")
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
