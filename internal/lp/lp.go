// Package lp solves the covering linear programs Capstan uses to price capacity: minimise c·x
// subject to Aᵀx ≥ b and x ≥ 0, where each column of x is an instance type (its price in c, its
// allocatable resources in a row of A) and b is the demand per resource. There are few resources
// (rows) and many types (columns), so a two-phase tableau simplex over k rows is small and exact.
package lp

import (
	"errors"
	"math"
)

// ErrInfeasible means no combination of the columns covers the demand (a resource no column has).
var ErrInfeasible = errors.New("demand cannot be covered")

const eps = 1e-9

// Solution is an optimal point.
type Solution struct {
	// Cost is the optimal c·x.
	Cost float64
	// X is the optimal amount of each column.
	X []float64
	// Y are the dual prices of the resources: what one more unit of each would cost.
	Y []float64
}

// Cover solves min c·x s.t. Σ_t a[t][r]·x[t] ≥ b[r] for every resource r, x ≥ 0.
func Cover(a [][]float64, c, b []float64) (*Solution, error) {
	k, n := len(b), len(c)
	// Columns: n structural, k surplus, k artificial; then the right-hand side.
	cols := n + 2*k
	t := make([][]float64, k)
	basis := make([]int, k)
	for r := range k {
		row := make([]float64, cols+1)
		for j := range n {
			row[j] = a[j][r]
		}
		row[n+r] = -1
		row[n+k+r] = 1
		row[cols] = b[r]
		if b[r] < 0 {
			for j := range row {
				row[j] = -row[j]
			}
			row[n+k+r] = 1
		}
		t[r] = row
		basis[r] = n + k + r
	}
	phase1 := make([]float64, cols)
	for r := range k {
		phase1[n+k+r] = 1
	}
	if err := simplex(t, basis, phase1, cols); err != nil {
		return nil, err
	}
	if objective(t, basis, phase1, cols) > eps*(1+norm(b)) {
		return nil, ErrInfeasible
	}
	// Drive artificials out of the basis where possible, then forbid them.
	for r := range k {
		if basis[r] < n+k {
			continue
		}
		for j := 0; j < n+k; j++ {
			if math.Abs(t[r][j]) > eps {
				pivot(t, basis, r, j, cols)
				break
			}
		}
	}
	phase2 := make([]float64, cols)
	copy(phase2, c)
	for j := n + k; j < cols; j++ {
		phase2[j] = math.Inf(1)
	}
	if err := simplex(t, basis, phase2, cols); err != nil {
		return nil, err
	}
	sol := &Solution{X: make([]float64, n), Y: make([]float64, k)}
	for r, j := range basis {
		if j < n {
			sol.X[j] = t[r][cols]
			sol.Cost += c[j] * t[r][cols]
		}
	}
	// y = (B⁻¹)ᵀ c_B; the artificial columns hold B⁻¹.
	for i := range k {
		for r, j := range basis {
			if j < n {
				sol.Y[i] += c[j] * t[r][n+k+i]
			}
		}
	}
	return sol, nil
}

func norm(b []float64) float64 {
	s := 0.0
	for _, v := range b {
		s += math.Abs(v)
	}
	return s
}

func objective(t [][]float64, basis []int, cost []float64, cols int) float64 {
	z := 0.0
	for r, j := range basis {
		z += cost[j] * t[r][cols]
	}
	return z
}

// simplex minimises cost over the tableau. The entering column is the one of most negative
// reduced cost (Dantzig's rule: few pivots over hundreds of types, where Bland's first-improving
// rule took dozens); after a run of degenerate pivots it switches to Bland's rule, which cannot
// cycle. Columns whose cost is +Inf never enter.
func simplex(t [][]float64, basis []int, cost []float64, cols int) error {
	k := len(t)
	in := make([]bool, cols)
	for _, j := range basis {
		in[j] = true
	}
	degenerate := 0
	for iter := 0; iter < 50*(cols+k); iter++ {
		bland := degenerate > k
		enter, most := -1, -eps
		for j := range cols {
			if in[j] || math.IsInf(cost[j], 1) {
				continue
			}
			// Reduced cost: c_j − c_B·B⁻¹A_j.
			rc := cost[j]
			for r, bj := range basis {
				if !math.IsInf(cost[bj], 1) {
					rc -= cost[bj] * t[r][j]
				}
			}
			if rc < most {
				enter, most = j, rc
				if bland {
					break
				}
			}
		}
		if enter < 0 {
			return nil
		}
		leave, best := -1, math.Inf(1)
		for r := range k {
			if t[r][enter] > eps {
				ratio := t[r][cols] / t[r][enter]
				if ratio < best-eps || (math.Abs(ratio-best) <= eps && leave >= 0 && basis[r] < basis[leave]) {
					leave, best = r, ratio
				}
			}
		}
		if leave < 0 {
			return errors.New("linear program is unbounded")
		}
		if best <= eps {
			degenerate++
		} else {
			degenerate = 0
		}
		in[basis[leave]], in[enter] = false, true
		pivot(t, basis, leave, enter, cols)
	}
	return errors.New("simplex did not converge")
}

func pivot(t [][]float64, basis []int, r, j, cols int) {
	p := t[r][j]
	for c := 0; c <= cols; c++ {
		t[r][c] /= p
	}
	for i := range t {
		if i == r || t[i][j] == 0 {
			continue
		}
		f := t[i][j]
		for c := 0; c <= cols; c++ {
			t[i][c] -= f * t[r][c]
		}
	}
	basis[r] = j
}
