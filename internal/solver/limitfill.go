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
// to those that run the most of those pods within the limit (densest; then with denseSlack), and
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
	var best *Result
	for _, slack := range []float64{0, denseSlack} {
		narrowed := false
		pools := slices.Clone(in.NodePools)
		for i := range pools {
			p := &pools[i]
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
			if dense := densest(p, taken, slack); len(dense) > 0 && len(dense) < len(p.InstanceTypes) {
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
		if fewer, than := len(dense.Unschedulable), res; best != nil {
			than = best
			if fewer < len(than.Unschedulable) || fewer == len(than.Unschedulable) && dense.Price() < than.Price() {
				best = dense
			}
		} else if fewer < len(than.Unschedulable) {
			best = dense
		}
	}
	return best
}

// densest are the pool's types that, bought alone, would run the most of pods within what is left
// of the pool's limits (at most all of them), less slack, for pods shaped as their average: per
// type, how many such pods fit one machine, times how many machines the tightest limit lets it buy
// (each machine counting its capacity, one node, its cheapest price).
func densest(p *NodePool, pods []*corev1.Pod, slack float64) []*cloudprovider.InstanceType {
	need := Requests(pods)
	scale := 1 / float64(len(pods))
	runs := make([]float64, len(p.InstanceTypes))
	best := 0.0
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
		best = max(best, runs[i])
	}
	if best < 1 {
		return nil
	}
	var out []*cloudprovider.InstanceType
	for i, it := range p.InstanceTypes {
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
