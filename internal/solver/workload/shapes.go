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
)

// podShape is one request vector (with the pod slot) and how many pods have it.
type podShape struct {
	req   corev1.ResourceList
	count int64
}

// shapesOf groups the pods by request vector, in a stable order.
func shapesOf(pods []*corev1.Pod) []*podShape {
	byKey := map[string]*podShape{}
	for _, p := range pods {
		rl := podRequestsWithSlot(p)
		k := shapeKey(rl)
		if byKey[k] == nil {
			byKey[k] = &podShape{req: rl}
		}
		byKey[k].count++
	}
	out := make([]*podShape, 0, len(byKey))
	for _, k := range slices.Sorted(maps.Keys(byKey)) {
		out = append(out, byKey[k])
	}
	return out
}

// cheapestPrice is the price of the type's cheapest available offering; false when it has none.
func cheapestPrice(it *cloudprovider.InstanceType) (float64, bool) {
	price := math.Inf(1)
	for _, o := range it.Offerings {
		if o.Available && o.Price < price {
			price = o.Price
		}
	}
	return price, !math.IsInf(price, 1)
}

// podRequestsWithSlot is the pod's requests with the one pod slot it takes.
func podRequestsWithSlot(p *corev1.Pod) corev1.ResourceList {
	rl := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{})
	rl[corev1.ResourcePods] = *oneQuantity()
	return rl
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
