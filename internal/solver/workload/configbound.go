package workload

import (
	"maps"
	"math"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/lp"
)

// ConfigLPBound is the configuration LP's lower bound (Gilmore and Gomory's relaxation of bin
// packing): choose machine configurations — an instance type and how many pods of each request
// shape it holds, within its allocatable — fractionally, to cover every shape's pods at least
// cost. Unlike LPBound and FitLPBound it cannot split a pod across machines, nor buy one
// machine's CPU and another's memory for the same pod; only the number of machines of each
// configuration is fractional. It is computed by column generation (the best configuration of
// each type for the current dual prices is an exact integer knapsack) and returned as
// Farley's bound, which holds at every iteration: the master's cost divided by the largest ratio
// of a configuration's dual value to its price (1 once no configuration improves). At most
// iterations rounds are run, and the result is never below FitLPBound (the larger of two lower
// bounds is one). Every whole-machine plan costs at least ConfigLPBound. It returns +Inf when
// some pod fits no type. Each distinct request vector is a shape: it is meant for workloads of a
// few shapes (the knapsack searches grow with their number).
func ConfigLPBound(its []*cloudprovider.InstanceType, pods []*corev1.Pod, iterations int) float64 {
	shapes := shapesOf(pods)
	if len(shapes) == 0 {
		return 0
	}
	names := map[corev1.ResourceName]bool{}
	for _, sh := range shapes {
		for n := range sh.req {
			names[n] = true
		}
	}
	res := slices.Sorted(maps.Keys(names))
	vec := func(rl corev1.ResourceList) []int64 {
		v := make([]int64, len(res))
		for i, n := range res {
			q := rl[n]
			v[i] = q.MilliValue()
		}
		return v
	}
	req := make([][]int64, len(shapes))
	demand := make([]float64, len(shapes))
	for i, sh := range shapes {
		req[i], demand[i] = vec(sh.req), float64(sh.count)
	}
	var price []float64
	var alloc [][]int64
	for _, it := range its {
		if p, ok := cheapestPrice(it); ok {
			price = append(price, p)
			alloc = append(alloc, vec(it.Allocatable()))
		}
	}
	// Columns: a type and a count per shape.
	type column struct {
		t int
		k []float64
	}
	var cols []column
	fits := func(a []int64, s int) int64 {
		n := int64(math.MaxInt64)
		for r := range res {
			if req[s][r] > 0 {
				n = min(n, a[r]/req[s][r])
			}
		}
		return n
	}
	for s := range shapes {
		// The cheapest single-shape configuration per shape, so that the master is feasible.
		bestT, bestCost := -1, math.Inf(1)
		for t := range price {
			if n := fits(alloc[t], s); n > 0 && price[t]/float64(n) < bestCost {
				bestT, bestCost = t, price[t]/float64(n)
			}
		}
		if bestT < 0 {
			return math.Inf(1)
		}
		k := make([]float64, len(shapes))
		k[s] = float64(fits(alloc[bestT], s))
		cols = append(cols, column{bestT, k})
	}
	lower := 0.0
	for range max(1, iterations) {
		a := make([][]float64, len(cols))
		c := make([]float64, len(cols))
		for j, col := range cols {
			a[j], c[j] = col.k, price[col.t]
		}
		sol, err := lp.Cover(a, c, demand)
		if err != nil {
			return math.Inf(1)
		}
		y := sol.Y
		// Price every type's best configuration for y.
		theta, added := 0.0, 0
		for t := range price {
			v, k, upper := knapsack(alloc[t], req, y)
			theta = max(theta, upper/price[t])
			if v > price[t]*(1+1e-9) {
				cols = append(cols, column{t, k})
				added++
			}
		}
		lower = max(lower, sol.Cost/max(1, theta))
		if added == 0 {
			break
		}
	}
	// Before it converges Farley's bound may be under the fit cuts' bound; both are bounds.
	return max(lower, FitLPBound(its, pods))
}

// knapsackNodes bounds one knapsack's search; past it the search stops with what it found and
// reports the fractional bound as the most value, which keeps Farley's bound valid.
const knapsackNodes = 200_000

// knapsack returns the most dual value y one machine of allocatable a can hold, with the count
// of each shape, and an upper bound on that value (equal to it when the search completed): a
// depth-first search over the shapes, most value per pod first, pruned by the fractional bound
// of each resource.
func knapsack(a []int64, req [][]int64, y []float64) (float64, []float64, float64) {
	order := make([]int, 0, len(req))
	for s := range req {
		if y[s] > 1e-12 {
			order = append(order, s)
		}
	}
	// Densest first: value per pod slot (every shape takes one).
	slices.SortFunc(order, func(i, j int) int {
		switch {
		case y[i] > y[j]:
			return -1
		case y[i] < y[j]:
			return 1
		}
		return i - j
	})
	// ratio[d][r] is the most value per unit of resource r among the shapes from order[d] on
	// (+Inf when one of them does not use r).
	ratio := make([][]float64, len(order)+1)
	ratio[len(order)] = make([]float64, len(a))
	for d := len(order) - 1; d >= 0; d-- {
		s := order[d]
		ratio[d] = slices.Clone(ratio[d+1])
		for r := range a {
			if req[s][r] == 0 {
				ratio[d][r] = math.Inf(1)
			} else {
				ratio[d][r] = max(ratio[d][r], y[s]/float64(req[s][r]))
			}
		}
	}
	best, bestK := 0.0, make([]float64, len(req))
	cur := make([]float64, len(req))
	left := slices.Clone(a)
	nodes := 0
	rootBound := math.Inf(1)
	for r := range left {
		rootBound = min(rootBound, float64(left[r])*ratio[0][r])
	}
	var dfs func(d int, value float64)
	dfs = func(d int, value float64) {
		nodes++
		if value > best {
			best = value
			copy(bestK, cur)
		}
		if d == len(order) || nodes > knapsackNodes {
			return
		}
		bound := math.Inf(1)
		for r := range left {
			bound = min(bound, float64(left[r])*ratio[d][r])
		}
		if value+bound <= best*(1+1e-12) {
			return
		}
		s := order[d]
		n := int64(math.MaxInt64)
		for r := range left {
			if req[s][r] > 0 {
				n = min(n, left[r]/req[s][r])
			}
		}
		for k := n; k >= 0; k-- {
			for r := range left {
				left[r] -= k * req[s][r]
			}
			cur[s] = float64(k)
			dfs(d+1, value+float64(k)*y[s])
			cur[s] = 0
			for r := range left {
				left[r] += k * req[s][r]
			}
		}
	}
	dfs(0, 0)
	if nodes > knapsackNodes {
		return best, bestK, max(best, rootBound)
	}
	return best, bestK, best
}
