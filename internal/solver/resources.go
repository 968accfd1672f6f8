package solver

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// vec is a dense resource vector in milli-units, indexed by a resourceIndex.
type vec []int64

// resourceIndex maps resource names to vector positions for one solve.
type resourceIndex struct {
	names []corev1.ResourceName
	pos   map[corev1.ResourceName]int
}

const (
	rCPU = iota
	rMemory
	rPods
	rEphemeral
	rFirstExtended
)

func newResourceIndex() *resourceIndex {
	ri := &resourceIndex{pos: map[corev1.ResourceName]int{}}
	for _, n := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
		ri.add(n)
	}
	return ri
}

func (ri *resourceIndex) add(n corev1.ResourceName) int {
	if p, ok := ri.pos[n]; ok {
		return p
	}
	ri.pos[n] = len(ri.names)
	ri.names = append(ri.names, n)
	return len(ri.names) - 1
}

// register adds every resource of rl; call it for all inputs before making vectors.
func (ri *resourceIndex) register(rl corev1.ResourceList) {
	for n := range rl {
		ri.add(n)
	}
}

func (ri *resourceIndex) len() int { return len(ri.names) }

func (ri *resourceIndex) vec(rl corev1.ResourceList) vec {
	v := make(vec, len(ri.names))
	if len(rl) >= len(ri.names) {
		// Looking each registered name up is cheaper than walking the map.
		for i, n := range ri.names {
			if q, ok := rl[n]; ok {
				v[i] = q.MilliValue()
			}
		}
		return v
	}
	for n, q := range rl {
		if p, ok := ri.pos[n]; ok {
			v[p] = q.MilliValue()
		}
	}
	return v
}

func (ri *resourceIndex) list(v vec) corev1.ResourceList {
	rl := corev1.ResourceList{}
	for i, x := range v {
		if x == 0 {
			continue
		}
		switch ri.names[i] {
		case corev1.ResourceCPU:
			rl[ri.names[i]] = *resource.NewMilliQuantity(x, resource.DecimalSI)
		case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
			rl[ri.names[i]] = *resource.NewQuantity(x/1000, resource.BinarySI)
		default:
			rl[ri.names[i]] = *resource.NewQuantity(x/1000, resource.DecimalSI)
		}
	}
	return rl
}

// podRequests are a pod's requests as kube-scheduler counts them — max(init containers,
// containers + sidecars) + overhead — plus one for the pod count.
func podRequests(p *corev1.Pod) corev1.ResourceList {
	if plainRequests(p) {
		// What the helper computes for such a pod, without its intermediate lists: the sum of
		// the containers' requests.
		rl := make(corev1.ResourceList, 4)
		for i := range p.Spec.Containers {
			for n, q := range p.Spec.Containers[i].Resources.Requests {
				if cur, ok := rl[n]; ok {
					cur.Add(q)
					rl[n] = cur
				} else {
					rl[n] = q.DeepCopy()
				}
			}
		}
		rl[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
		return rl
	}
	// As kube-scheduler (InPlacePodVerticalScaling is on): a resizing pod counts the larger of
	// its desired, allocated and actuated requests.
	rl := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true})
	rl[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
	return rl
}

// plainRequests reports whether the pod's requests are just its containers' summed: no init
// containers, overhead, pod-level resources, resource claims, container or pod resource status,
// or pending resize (a pending pod as most workloads make it).
func plainRequests(p *corev1.Pod) bool {
	return len(p.Spec.InitContainers) == 0 && p.Spec.Overhead == nil && p.Spec.Resources == nil && len(p.Spec.ResourceClaims) == 0 &&
		len(p.Status.ContainerStatuses) == 0 && len(p.Status.InitContainerStatuses) == 0 && p.Status.Resources == nil &&
		p.Status.AllocatedResources == nil &&
		!slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodResizePending })
}

// Requests sums the pods' requests as the solver counts them on an existing node (each pod's
// kube-scheduler requests plus one pod), for ExistingNode.Requested.
func Requests(pods []*corev1.Pod) corev1.ResourceList {
	out := corev1.ResourceList{}
	one := *resource.NewQuantity(1, resource.DecimalSI)
	for _, p := range pods {
		if plainRequests(p) {
			// podRequests(p) added in place, without its list.
			for i := range p.Spec.Containers {
				for n, q := range p.Spec.Containers[i].Resources.Requests {
					cur := out[n]
					cur.Add(q)
					out[n] = cur
				}
			}
			cur := out[corev1.ResourcePods]
			cur.Add(one)
			out[corev1.ResourcePods] = cur
			continue
		}
		for n, q := range podRequests(p) {
			cur := out[n]
			cur.Add(q)
			out[n] = cur
		}
	}
	return out
}

func (v vec) add(o vec) {
	for i := range v {
		v[i] += o[i]
	}
}

func (v vec) sub(o vec) {
	for i := range v {
		v[i] -= o[i]
	}
}

func (v vec) clone() vec { return slices.Clone(v) }

// fitsWith reports whether v + extra ≤ limit in every dimension extra asks for: as the
// kube-scheduler counts, a node that holds more of a resource than it advertises (a device
// plugin gone) still takes pods that do not request it.
func (v vec) fitsWith(extra, limit vec) bool {
	for i := range v {
		if extra[i] > 0 && v[i]+extra[i] > limit[i] {
			return false
		}
	}
	return true
}

// lessEq reports whether v ≤ limit in every dimension.
func (v vec) lessEq(limit vec) bool {
	for i := range v {
		if v[i] > limit[i] {
			return false
		}
	}
	return true
}

// minInto lowers every dimension of v to at most o's.
func (v vec) minInto(o vec) {
	for i := range v {
		v[i] = min(v[i], o[i])
	}
}

// maxInto raises every dimension of v to at least o's.
func (v vec) maxInto(o vec) {
	for i := range v {
		if o[i] > v[i] {
			v[i] = o[i]
		}
	}
}

// describe renders the non-zero dimensions of v ("cpu 1500m, memory 2Gi").
func (ri *resourceIndex) describe(v vec) string {
	var parts []string
	rl := ri.list(v)
	for _, n := range ri.names {
		if q, ok := rl[n]; ok {
			parts = append(parts, fmt.Sprintf("%s %s", n, q.String()))
		}
	}
	return strings.Join(parts, ", ")
}
