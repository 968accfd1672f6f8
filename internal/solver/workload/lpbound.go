package workload

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"capstan.dev/capstan/internal/cloudprovider"
)

// LPBound is the optimum of the linear relaxation of buying capacity for pods: minimise
// Σ price·x over instance types subject to Σ allocatable·x ≥ the pods' total requests, for CPU and
// memory, x ≥ 0. With two constraints an optimal vertex uses at most two types, so it is computed
// exactly by trying every type alone and every pair. Prices are each type's cheapest available
// offering. No plan that buys whole machines can cost less.
func LPBound(its []*cloudprovider.InstanceType, pods []*corev1.Pod) float64 {
	var needCPU, needMem float64
	for _, p := range pods {
		rl := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
		needCPU += float64(rl.Cpu().MilliValue())
		needMem += float64(rl.Memory().Value())
	}
	type col struct{ cpu, mem, price float64 }
	var cols []col
	for _, it := range its {
		price := math.Inf(1)
		for _, o := range it.Offerings {
			if o.Available && o.Price < price {
				price = o.Price
			}
		}
		a := it.Allocatable()
		c := col{float64(a.Cpu().MilliValue()), float64(a.Memory().Value()), price}
		if c.cpu > 0 && c.mem > 0 && !math.IsInf(price, 1) {
			cols = append(cols, c)
		}
	}
	best := math.Inf(1)
	for _, c := range cols {
		x := math.Max(needCPU/c.cpu, needMem/c.mem)
		best = math.Min(best, x*c.price)
	}
	for i := range cols {
		for j := i + 1; j < len(cols); j++ {
			a, b := cols[i], cols[j]
			det := a.cpu*b.mem - b.cpu*a.mem
			if det == 0 {
				continue
			}
			x := (needCPU*b.mem - b.cpu*needMem) / det
			y := (a.cpu*needMem - needCPU*a.mem) / det
			if x < 0 || y < 0 {
				continue
			}
			best = math.Min(best, x*a.price+y*b.price)
		}
	}
	return best
}
