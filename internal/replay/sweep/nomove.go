package sweep

import (
	"math"
)

// Holding is one machine as a scale-in finds it: its hourly price and how many pods of each
// Deployment (by index) it runs.
type Holding struct {
	Price float64
	Pods  []int
}

// maxKeepStates bounds CheapestKeep's table (the product of the wanted counts plus one).
const maxKeepStates = 8 << 20

// CheapestKeep is the price of the cheapest set of the machines that runs at least want[d] pods of
// each Deployment d as they are: the best end a scale-in could reach without moving a pod (a
// ReplicaSet keeps any want[d] of its pods, so a ranking that keeps exactly that set of machines
// needs no move). It solves the covering problem exactly, by dynamic programming over the counts
// still wanted, and returns +Inf when no set is enough, or when the table would exceed
// maxKeepStates (then ok is false).
func CheapestKeep(machines []Holding, want []int) (price float64, ok bool) {
	states := 1
	for _, w := range want {
		states *= w + 1
		if states > maxKeepStates {
			return math.Inf(1), false
		}
	}
	// best[s] is the cheapest price covering state s, a mixed-radix number of the counts covered so
	// far (each capped at its want).
	best := make([]float64, states)
	next := make([]float64, states)
	for i := range best {
		best[i] = math.Inf(1)
	}
	best[0] = 0
	digits := make([]int, len(want))
	for _, m := range machines {
		copy(next, best)
		for s := range states {
			if math.IsInf(best[s], 1) {
				continue
			}
			decode(s, want, digits)
			t := 0
			for d := len(want) - 1; d >= 0; d-- {
				v := 0
				if d < len(m.Pods) {
					v = m.Pods[d]
				}
				t = t*(want[d]+1) + min(digits[d]+v, want[d])
			}
			if p := best[s] + m.Price; p < next[t] {
				next[t] = p
			}
		}
		best, next = next, best
	}
	return best[states-1], true
}

// decode writes state s's counts into digits (Deployment 0 the least significant).
func decode(s int, want, digits []int) {
	for d := range want {
		digits[d] = s % (want[d] + 1)
		s /= want[d] + 1
	}
}
