package workload

import (
	"math"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/lp"
)

// LPBound is the optimum of the linear relaxation of buying capacity for pods: minimise
// Σ price·x over instance types subject to Σ allocatable·x ≥ the pods' total requests for every
// resource they request (CPU, memory, the pod count, GPUs…), x ≥ 0. Prices are each type's
// cheapest available offering. No plan that buys whole machines can cost less. It returns +Inf
// when no mix of types covers the requests.
func LPBound(its []*cloudprovider.InstanceType, pods []*corev1.Pod) float64 {
	demand := corev1.ResourceList{}
	for _, p := range pods {
		for k, q := range podRequestsWithSlot(p) {
			cur := demand[k]
			cur.Add(q)
			demand[k] = cur
		}
	}
	var names []corev1.ResourceName
	var b []float64
	for k, q := range demand {
		if q.Sign() > 0 {
			names = append(names, k)
			b = append(b, 1)
		}
	}
	var a [][]float64
	var c []float64
	for _, it := range its {
		price, ok := cheapestPrice(it)
		if !ok {
			continue
		}
		alloc := it.Allocatable()
		row := make([]float64, len(names))
		for i, n := range names {
			q := alloc[n]
			d := demand[n]
			// Scaled so that each resource's demand is 1: keeps the tableau well conditioned.
			row[i] = float64(q.MilliValue()) / float64(d.MilliValue())
		}
		a = append(a, row)
		c = append(c, price)
	}
	sol, err := lp.Cover(a, c, b)
	if err != nil {
		return math.Inf(1)
	}
	return sol.Cost
}
