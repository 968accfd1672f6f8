package solver

import (
	"cmp"
	"slices"
)

// Coalescing (Options.FewerMachines). The packing fills one claim at a time towards the type that
// holds the most of the coming pods per dollar, so a batch's last pods often land on a machine of
// their own: 100 pods on two machines where one machine of twice the size costs the same. With
// the option, after packing and repacking, claims of one group (same pool and requirements, pods
// whose placement matters to nothing but their machine's resources, a pool without limits) are
// merged pairwise while the cheapest type holding a pair's pods costs no more than the two
// machines, within coalesceTolerance: fewer, larger machines for the same price.
//
// It is off by default because it makes scale-downs less calm: with pod deletion costs a
// ReplicaSet's scale-in empties whole machines, and smaller machines are emptied with less left
// over to consolidate (docs/benchmarks.md, "Scale-downs in the replay").

// coalesceTolerance is how much dearer (a fraction) one machine may be than the two it replaces.
const coalesceTolerance = 0.005

// coalesceMaxBins bounds the claims of one group considered for merging: the least used ones
// (claims full to their target rarely merge at equal price with anything).
const coalesceMaxBins = 64

// coalesce merges the claims of each group while a merge costs no more (Options.FewerMachines).
func (s *solver) coalesce() {
	if !s.opts.FewerMachines {
		return
	}
	for _, g := range s.interchangeableGroups() {
		if len(g.bins) < 2 {
			continue
		}
		s.groupTypes(g)
		slices.SortStableFunc(g.bins, func(a, b *bin) int { return cmp.Compare(a.used[rCPU], b.used[rCPU]) })
		if len(g.bins) > coalesceMaxBins {
			g.bins = g.bins[:coalesceMaxBins]
		}
		for _, b := range g.bins {
			b.price = g.cheapest(b.used)
		}
		merged := map[*bin]bool{}
		for g.coalesceOnce(merged) {
		}
		// Only the merged claims are rewritten: the others keep their candidates.
		g.bins = slices.DeleteFunc(g.bins, func(b *bin) bool { return !merged[b] })
		s.applyRepack(g)
	}
}

// coalesceOnce merges the pair of bins whose one machine costs least against their two, when it
// costs at most coalesceTolerance more than they do; it marks the bins it changed.
func (g *repackGroup) coalesceOnce(merged map[*bin]bool) bool {
	bestI, bestJ, bestRatio := -1, -1, 0.0
	sum := make(vec, 0)
	for i, a := range g.bins {
		if len(a.pods) == 0 {
			continue
		}
		for j := i + 1; j < len(g.bins); j++ {
			b := g.bins[j]
			if len(b.pods) == 0 {
				continue
			}
			sum = append(sum[:0], a.used...)
			sum.add(b.used)
			p := g.cheapest(sum)
			if r := p / (a.price + b.price); r <= 1+coalesceTolerance && (bestI < 0 || r < bestRatio) {
				bestI, bestJ, bestRatio = i, j, r
			}
		}
	}
	if bestI < 0 {
		return false
	}
	a, b := g.bins[bestI], g.bins[bestJ]
	g.join(a, b)
	merged[a], merged[b] = true, true
	return true
}
