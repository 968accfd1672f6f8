package solver

import (
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/spend"
)

// fillLimits plans again, when a NodePool's limits left pods out, with the pool's types narrowed
// to those that run the most of those pods within the limit (limitRuns, densest; then with denseSlack), and
// returns the re-plan that places the most pods, the cheaper at a tie, when it places more than
// the plan (nil otherwise). The cheapest machines per pod are often the ones that use a
// limit worst: 1.5-CPU pods on 2-vCPU machines spend 2 of a CPU limit per pod, on 8-vCPU machines
// 1.6; under `cpu: 16` the first buys eight machines for 8 pods, the second two for 10. When a
// limit binds, what it lets run is what counts; the re-plan is still the cheapest among the dense
// types.
func fillLimits(in Input, opts Options, res *Result) *Result {
	short := map[string][]*corev1.Pod{}
	for _, u := range res.Unschedulable {
		for _, m := range u.Pools {
			if m.Stage == MissLimits {
				short[m.NodePool] = append(short[m.NodePool], u.Pod)
			}
		}
	}
	if len(short) == 0 {
		return nil
	}
	// Per pool, how many of its pods each type would run within the limits (runs).
	runs := map[string][]float64{}
	for _, p := range in.NodePools {
		refused := short[p.Name]
		if len(refused) == 0 || p.Remaining == nil {
			continue
		}
		taken := refused
		for _, nc := range res.NodeClaims {
			if nc.NodePool == p.Name {
				taken = append(slices.Clip(taken), nc.Pods...)
			}
		}
		runs[p.Name] = limitRuns(&p, taken)
	}
	best := res
	for _, slack := range []float64{0, denseSlack} {
		narrowed := false
		pools := slices.Clone(in.NodePools)
		for i := range pools {
			p := &pools[i]
			if dense := densest(p.InstanceTypes, runs[p.Name], slack); len(dense) > 0 && len(dense) < len(p.InstanceTypes) {
				p.InstanceTypes, narrowed = dense, true
			}
		}
		if !narrowed {
			continue
		}
		again := in
		again.NodePools = pools
		dense := solveOnce(again, opts)
		if dense.fellBack {
			dense = replanReserved(again, opts, dense)
		}
		fewer, than := len(dense.Unschedulable), len(best.Unschedulable)
		if fewer < than || fewer == than && best != res && dense.Price() < best.Price() {
			best = dense
		}
	}
	if best == res {
		return nil
	}
	return best
}

// limitRuns is, per type of the pool, how many of pods it would run bought alone within what is
// left of the pool's limits (at most all of them), for pods shaped as their average: how many
// such pods fit one machine, times how many machines the tightest limit lets it buy (each machine
// counting its capacity, one node, its cheapest price).
func limitRuns(p *NodePool, pods []*corev1.Pod) []float64 {
	need := Requests(pods)
	scale := 1 / float64(len(pods))
	runs := make([]float64, len(p.InstanceTypes))
	for i, it := range p.InstanceTypes {
		alloc := it.Allocatable()
		fit := math.Inf(1)
		for r, q := range need {
			if per := q.AsApproximateFloat64() * scale; per > 0 {
				a := alloc[r]
				fit = min(fit, math.Floor(a.AsApproximateFloat64()/per))
			}
		}
		if fit < 1 || math.IsInf(fit, 1) {
			continue
		}
		machines := math.Inf(1)
		for r, left := range p.Remaining {
			var use float64
			switch r {
			case karpv1.ResourceNodes:
				use = 1
			case spend.LimitKey:
				price, ok := CheapestOffering(it, p.Requirements)
				if !ok {
					continue
				}
				use = price
			default:
				c, ok := it.Capacity[r]
				if !ok {
					continue
				}
				use = c.AsApproximateFloat64()
			}
			if use > 0 {
				machines = min(machines, math.Floor(left.AsApproximateFloat64()/use))
			}
		}
		runs[i] = min(fit*machines, float64(len(pods)))
	}
	return runs
}

// densest are the types whose runs (limitRuns) are within slack of the most; nil when no type
// runs a pod (or runs is nil: the pool had none refused for its limits).
func densest(types []*cloudprovider.InstanceType, runs []float64, slack float64) []*cloudprovider.InstanceType {
	best := 0.0
	for _, r := range runs {
		best = max(best, r)
	}
	if best < 1 {
		return nil
	}
	var out []*cloudprovider.InstanceType
	for i, it := range types {
		if runs[i] >= best*(1-slack) {
			out = append(out, it)
		}
	}
	return out
}

// denseSlack is how many fewer pods than the densest type a type may run within the limits and
// still be offered to fillLimits' second re-plan: the densest alone is often a dear one (on-demand
// only, a rare family), and the near-dense types may place as many, cheaper.
const denseSlack = 0.05
