package workload

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

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
	type shape struct {
		req   corev1.ResourceList
		count int64
	}
	shapes := map[string]*shape{}
	demand := corev1.ResourceList{}
	for _, p := range pods {
		rl := podRequestsWithSlot(p)
		key := shapeKey(rl)
		s := shapes[key]
		if s == nil {
			s = &shape{req: rl}
			shapes[key] = s
		}
		s.count++
		for k, q := range rl {
			cur := demand[k]
			cur.Add(q)
			demand[k] = cur
		}
	}
	var names []corev1.ResourceName
	for k, q := range demand {
		if q.Sign() > 0 {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	var priced []*cloudprovider.InstanceType
	var c []float64
	for _, it := range its {
		price := math.Inf(1)
		for _, o := range it.Offerings {
			if o.Available && o.Price < price {
				price = o.Price
			}
		}
		if !math.IsInf(price, 1) {
			priced = append(priced, it)
			c = append(c, price)
		}
	}
	alloc := make([]corev1.ResourceList, len(priced))
	for i, it := range priced {
		alloc[i] = it.Allocatable()
	}
	// Fit sets, one per distinct set of types that some shape fits, with the shapes that fit
	// within each.
	type fitSet struct {
		in      []bool
		covered corev1.ResourceList
	}
	var sets []*fitSet
	bySet := map[string]*fitSet{}
	shapeSets := map[*shape][]bool{}
	for _, key := range slices.Sorted(maps.Keys(shapes)) {
		s := shapes[key]
		in := make([]bool, len(priced))
		var b strings.Builder
		for i := range priced {
			in[i] = cloudprovider.Fits(s.req, alloc[i])
			if in[i] {
				b.WriteByte('1')
			} else {
				b.WriteByte('0')
			}
		}
		shapeSets[s] = in
		if bySet[b.String()] == nil && len(sets) < maxFitSets {
			f := &fitSet{in: in, covered: corev1.ResourceList{}}
			bySet[b.String()] = f
			sets = append(sets, f)
		}
	}
	subset := func(a, b []bool) bool {
		for i := range a {
			if a[i] && !b[i] {
				return false
			}
		}
		return true
	}
	for _, f := range sets {
		for s, in := range shapeSets {
			if !subset(in, f.in) {
				continue
			}
			for k, q := range s.req {
				total := f.covered[k]
				for range s.count {
					total.Add(q)
				}
				f.covered[k] = total
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
	a := make([][]float64, len(priced))
	for t := range priced {
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

// shapeKey identifies a request vector.
func shapeKey(rl corev1.ResourceList) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(rl)) {
		q := rl[k]
		fmt.Fprintf(&b, "%s=%d;", k, q.MilliValue())
	}
	return b.String()
}

// podRequestsWithSlot is the pod's requests with the one pod slot it takes.
func podRequestsWithSlot(p *corev1.Pod) corev1.ResourceList {
	rl := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	rl[corev1.ResourcePods] = *oneQuantity()
	return rl
}
