package solver

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// mostEfficient must pick exactly what a stable sort of the candidates by efficiency, truncated,
// picks: the packing's tie-breaks depend on the order.
func TestMostEfficientIsTheStableSortsPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 2000 {
		n := r.IntN(60)
		p := &pool{types: make([]*itInfo, n)}
		for i := range p.types {
			// Few distinct values, so that ties are common.
			p.types[i] = &itInfo{efficiency: float64(r.IntN(6)) / 5, pos: int32(i)}
		}
		p.sortByEfficiency()
		// Several claims ask the same pool, each with some of its types in its order.
		for range 3 {
			var cands []*itInfo
			for _, info := range p.types {
				if r.IntN(3) > 0 {
					cands = append(cands, info)
				}
			}
			k := 1 + r.IntN(20)
			want := slices.Clone(cands)
			slices.SortStableFunc(want, func(a, b *itInfo) int { return cmpFloat(b.efficiency, a.efficiency) })
			want = want[:min(k, len(cands))]
			if got := p.mostEfficient(cands, k); !slices.Equal(got, want) {
				t.Fatalf("trial %d (n=%d, k=%d): got a different shortlist or order", trial, n, k)
			}
		}
	}
}
