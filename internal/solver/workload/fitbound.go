package workload

import (
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/lp"
)

// maxFitSets bounds the fit cuts of FitLPBound; past it the bound keeps only the first ones (a
// bound with fewer cuts is still a bound, only looser).
const maxFitSets = 64

// FitLPBound is LPBound tightened by fit cuts: a pod can only run on a type whose allocatable
// holds its requests, so for every set F of types that is some pod shape's fit set, the capacity
// bought of F's types must cover, resource by resource, the requests of every pod that fits only
// within F. LPBound lets a 2-CPU pod be covered by fractions of 2-vCPU machines whose allocatable
// is under 2 CPUs; these cuts do not. Every whole-machine plan satisfies them, so no plan costs
// less than FitLPBound, and FitLPBound ≥ LPBound. It returns +Inf when no mix of types covers the
// requests.
func FitLPBound(its []*cloudprovider.InstanceType, pods []*corev1.Pod) float64 {
	shapes := shapesOf(pods)
	demand := corev1.ResourceList{}
	for _, sh := range shapes {
		addTimes(demand, sh.req, sh.count)
	}
	var names []corev1.ResourceName
	for k, q := range demand {
		if q.Sign() > 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var alloc []corev1.ResourceList
	var c []float64
	for _, it := range its {
		if price, ok := cheapestPrice(it); ok {
			alloc = append(alloc, it.Allocatable())
			c = append(c, price)
		}
	}
	// Fit sets, one per distinct set of types that some shape fits, with what the shapes that
	// fit only within each request.
	type fitSet struct {
		in      []bool
		covered corev1.ResourceList
	}
	var sets []*fitSet
	bySet := map[string]*fitSet{}
	fitsOf := make([][]bool, len(shapes))
	for i, sh := range shapes {
		in := make([]bool, len(alloc))
		var b strings.Builder
		for t := range alloc {
			in[t] = cloudprovider.Fits(sh.req, alloc[t])
			b.WriteByte("01"[boolIndex(in[t])])
		}
		fitsOf[i] = in
		if bySet[b.String()] == nil && len(sets) < maxFitSets {
			f := &fitSet{in: in, covered: corev1.ResourceList{}}
			bySet[b.String()] = f
			sets = append(sets, f)
		}
	}
	for _, f := range sets {
		for i, sh := range shapes {
			if subset(fitsOf[i], f.in) {
				addTimes(f.covered, sh.req, sh.count)
			}
		}
	}
	// Rows: the total demand per resource (LPBound's), then each fit set's cut, each scaled so
	// that the resource's total demand is 1.
	var rows []func(t int) float64
	var b []float64
	for _, n := range names {
		d := demand[n]
		rows = append(rows, func(t int) float64 { q := alloc[t][n]; return float64(q.MilliValue()) / float64(d.MilliValue()) })
		b = append(b, 1)
		for _, f := range sets {
			need := f.covered[n]
			if need.Sign() <= 0 || !slices.Contains(f.in, false) {
				continue
			}
			rows = append(rows, func(t int) float64 {
				if !f.in[t] {
					return 0
				}
				q := alloc[t][n]
				return float64(q.MilliValue()) / float64(d.MilliValue())
			})
			b = append(b, float64(need.MilliValue())/float64(d.MilliValue()))
		}
	}
	a := make([][]float64, len(alloc))
	for t := range alloc {
		a[t] = make([]float64, len(rows))
		for r, row := range rows {
			a[t][r] = row(t)
		}
	}
	sol, err := lp.Cover(a, c, b)
	if err != nil {
		return math.Inf(1)
	}
	return sol.Cost
}

// addTimes adds n times rl to sum.
func addTimes(sum, rl corev1.ResourceList, n int64) {
	for k, q := range rl {
		cur := sum[k]
		cur.Add(*resource.NewMilliQuantity(q.MilliValue()*n, q.Format))
		sum[k] = cur
	}
}

// subset reports whether every type in a is in b.
func subset(a, b []bool) bool {
	for i := range a {
		if a[i] && !b[i] {
			return false
		}
	}
	return true
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}
