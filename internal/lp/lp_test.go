package lp

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestCoverKnownOptimum(t *testing.T) {
	// Type 0: 2 CPU, 1 GiB, $1. Type 1: 1 CPU, 4 GiB, $1. Need 10 CPU and 12 GiB.
	// 2x+y ≥ 10, x+4y ≥ 12 → x = 4, y = 2, cost 6.
	sol, err := Cover([][]float64{{2, 1}, {1, 4}}, []float64{1, 1}, []float64{10, 12})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(sol.Cost-6) > 1e-6 || math.Abs(sol.X[0]-4) > 1e-6 || math.Abs(sol.X[1]-2) > 1e-6 {
		t.Fatalf("got cost %v x %v, want 6 at (4, 2)", sol.Cost, sol.X)
	}
	// Duals price the resources so that b·y equals the cost (strong duality).
	if dual := 10*sol.Y[0] + 12*sol.Y[1]; math.Abs(dual-6) > 1e-6 {
		t.Fatalf("b·y = %v, want 6", dual)
	}
}

func TestCoverInfeasible(t *testing.T) {
	if _, err := Cover([][]float64{{1, 0}}, []float64{1}, []float64{1, 1}); err != ErrInfeasible {
		t.Fatalf("err = %v, want ErrInfeasible", err)
	}
}

// With two resources the optimum uses at most two types, so enumerating singles and pairs gives
// the exact optimum to compare against.
func TestCoverMatchesEnumerationOnTwoResources(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := 2 + r.IntN(30)
		a := make([][]float64, n)
		c := make([]float64, n)
		for i := range n {
			a[i] = []float64{1 + float64(r.IntN(64)), 1 + float64(r.IntN(256))}
			c[i] = 0.01 + r.Float64()
		}
		b := []float64{float64(1 + r.IntN(1000)), float64(1 + r.IntN(4000))}
		sol, err := Cover(a, c, b)
		if err != nil {
			t.Fatal(err)
		}
		best := math.Inf(1)
		for i := range n {
			best = math.Min(best, c[i]*math.Max(b[0]/a[i][0], b[1]/a[i][1]))
			for j := i + 1; j < n; j++ {
				det := a[i][0]*a[j][1] - a[j][0]*a[i][1]
				if det == 0 {
					continue
				}
				x := (b[0]*a[j][1] - a[j][0]*b[1]) / det
				y := (a[i][0]*b[1] - b[0]*a[i][1]) / det
				if x >= 0 && y >= 0 {
					best = math.Min(best, x*c[i]+y*c[j])
				}
			}
		}
		if math.Abs(sol.Cost-best) > 1e-6*best {
			t.Fatalf("trial %d: simplex %v, enumeration %v", trial, sol.Cost, best)
		}
	}
}
