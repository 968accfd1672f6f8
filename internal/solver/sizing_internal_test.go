package solver

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// mostEfficient must pick exactly what a stable sort by efficiency, truncated, picks: the
// packing's tie-breaks depend on the order.
func TestMostEfficientIsTheStableSortsPrefix(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := range 2000 {
		n := r.IntN(60)
		cands := make([]*itInfo, n)
		for i := range cands {
			// Few distinct values, so that ties are common.
			cands[i] = &itInfo{efficiency: float64(r.IntN(6)) / 5}
		}
		k := 1 + r.IntN(20)
		want := slices.Clone(cands)
		slices.SortStableFunc(want, func(a, b *itInfo) int { return cmpFloat(b.efficiency, a.efficiency) })
		want = want[:min(k, n)]
		if got := mostEfficient(cands, k); !slices.Equal(got, want) {
			t.Fatalf("trial %d (n=%d, k=%d): got a different shortlist or order", trial, n, k)
		}
	}
}
