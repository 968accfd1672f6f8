package solver

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// Capacity reservations. A reserved offering is priced near zero, so the packing plans claims
// onto reserved types first; but a reservation holds a fixed number of machines, so finish gives
// the plan's claims the reservations' slots one by one, in creation order: a claim that gets a
// slot is pinned to it (capacity type reserved, the reservation's zone, type and id in its
// requirements — the provider launches a reserved offering only for a claim that names it);
// a claim that gets none is kept off reserved offerings and launched as its other capacity
// types allow; a claim that may only be reserved, or asks for a reservation by id, and gets no
// slot is not planned, and its pods are unschedulable. The slots are each offering's
// ReservationCapacity, the provider's count less the NodeClaims already pinned
// (cloudprovider.LessPinned): never more machines than a reservation holds.

// reservationSlots is how many claims each reservation of the input can still take; nil when
// no pool offers a reservation (an unavailable one has none left).
func reservationSlots(in *Input) map[string]int {
	var slots map[string]int
	for i := range in.NodePools {
		for _, it := range in.NodePools[i].InstanceTypes {
			for _, o := range it.Offerings {
				if o.ReservationID == "" {
					continue
				}
				if slots == nil {
					slots = map[string]int{}
				}
				n := o.ReservationCapacity
				if !o.Available {
					n = 0
				}
				if cur, ok := slots[o.ReservationID]; !ok || n < cur {
					slots[o.ReservationID] = n
				}
			}
		}
	}
	return slots
}

// reserve gives the claim a reservation's slot, or keeps it off reserved offerings; it returns
// an error when the claim cannot be launched at all for want of a slot.
func (s *solver) reserve(t *target) error {
	ct, hasCT := t.reqs.Get(karpv1.CapacityTypeLabelKey)
	if hasCT && !ct.Allows(karpv1.CapacityTypeReserved) {
		return nil
	}
	zone, hasZone := t.reqs.Get(karpv1.ZoneLabelKey)
	rid, hasRID := t.reqs.Get(cloudprovider.ReservationIDLabelKey)
	var best *itInfo
	var bestOff *cloudprovider.Offering
	offersReserved := false
	for _, info := range t.candidates {
		if !t.used.lessEq(info.alloc) {
			continue
		}
		for i := range info.it.Offerings {
			o := &info.it.Offerings[i]
			if o.ReservationID == "" || !o.Available || hasZone && !zone.Allows(o.Zone) || hasRID && !rid.Allows(o.ReservationID) {
				continue
			}
			offersReserved = true
			if s.slots[o.ReservationID] <= 0 {
				continue
			}
			if bestOff == nil || cmp.Or(cmp.Compare(o.Price, bestOff.Price), cmp.Compare(info.it.Name, best.it.Name), cmp.Compare(o.ReservationID, bestOff.ReservationID)) < 0 {
				best, bestOff = info, o
			}
		}
	}
	if bestOff != nil {
		s.slots[bestOff.ReservationID]--
		t.reqs = t.reqs.Clone() // it may be shared with the pool's cached fit
		cloudprovider.PinReservation(&t.reqs, best.it.Name, *bestOff)
		t.candidates = []*itInfo{best}
		return nil
	}
	if !offersReserved && !hasRID {
		return nil
	}
	if hasRID {
		return fmt.Errorf("the capacity reservations it asks for (%s) have no machine left", rid.String())
	}
	t.reqs = t.reqs.Clone()
	t.reqs.Add(requirements.MustNew(karpv1.CapacityTypeLabelKey, requirements.NotIn, karpv1.CapacityTypeReserved))
	of := offeringFilter(t.reqs)
	mask := s.offerings.mask(t.reqs)
	for _, info := range t.candidates {
		if _, ok := s.offerings.price(info, mask, &of); ok && t.used.lessEq(info.alloc) {
			s.result.fellBack = true
			return nil
		}
	}
	return fmt.Errorf("its NodePool allows only reserved capacity, and the capacity reservations have no machine left")
}

// unreserved records the claim's pods as unschedulable for want of a reservation's slot.
func (s *solver) unreserved(t *target, err error) {
	for _, p := range t.pods {
		reason := fmt.Sprintf("NodePool %s: %v", t.pool.np.Name, err)
		s.result.Unschedulable = append(s.result.Unschedulable, PodError{Pod: p, Reason: reason,
			Pools: []PoolMiss{{NodePool: t.pool.np.Name, Stage: MissLimits, Reason: err.Error()}}})
	}
}

// replanReserved plans again what a plan put on reservations that ran out. The packing prices
// every claim at a reserved offering's price however few machines the reservation has left, so
// a plan whose claims outnumber a reservation's machines is shaped for them — many machines of
// the reserved type — even where the claims that got no machine would be cheaper as a few larger
// ones. The claims pinned to a reservation are kept, as planned machines the other pods may
// still join; the other pods are planned again with every reservation that ran out unavailable.
// Each round runs at least one more reservation out, so the rounds end.
func replanReserved(in Input, opts Options, res *Result) *Result {
	for round := 0; res.fellBack && round <= len(res.slotsLeft); round++ {
		res = replanOnce(in, opts, res)
	}
	return res
}

// reservedNodePrefix names the pinned claims while they stand in as nodes of a re-plan.
const reservedNodePrefix = "capstan.dev/pinned-claim-"

func replanOnce(in Input, opts Options, res *Result) *Result {
	var pinned []*PlannedNodeClaim
	onPinned := map[*corev1.Pod]bool{}
	for _, nc := range res.NodeClaims {
		if nc.Requirements.Has(cloudprovider.ReservationIDLabelKey) {
			pinned = append(pinned, nc)
			for _, p := range nc.Pods {
				onPinned[p] = true
			}
		}
	}
	next := in
	next.Pods = make([]*corev1.Pod, 0, len(in.Pods))
	for _, p := range in.Pods {
		if !onPinned[p] {
			next.Pods = append(next.Pods, p)
		}
	}
	next.Nodes = slices.Clip(in.Nodes)
	byPool := map[string]*NodePool{}
	for i := range in.NodePools {
		byPool[in.NodePools[i].Name] = &in.NodePools[i]
	}
	held := map[string][]*PlannedNodeClaim{}
	for i, nc := range pinned {
		name := reservedNodePrefix + strconv.Itoa(i)
		held[nc.NodePool] = append(held[nc.NodePool], nc)
		labels := nc.Requirements.Labels()
		labels[corev1.LabelHostname] = name
		node := ExistingNode{Name: name, Labels: labels, Allocatable: nc.InstanceTypes[0].Allocatable(), Pods: slices.Clip(nc.Pods)}
		if np := byPool[nc.NodePool]; np != nil {
			node.Taints = np.Taints
		}
		// What the claim's DaemonSets take stands in as one pod.
		overhead := nc.Requests.DeepCopy()
		for k, q := range Requests(nc.Pods) {
			if k == corev1.ResourcePods {
				continue
			}
			o := overhead[k]
			o.Sub(q)
			overhead[k] = o
		}
		delete(overhead, corev1.ResourcePods)
		for k, q := range overhead {
			if q.Sign() <= 0 {
				delete(overhead, k)
			}
		}
		if len(overhead) > 0 {
			node.Pods = append(node.Pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "capstan.dev", Name: "daemonsets-" + strconv.Itoa(i)},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "daemonsets", Resources: corev1.ResourceRequirements{Requests: overhead}}}}})
		}
		next.Nodes = append(next.Nodes, node)
	}
	next.NodePools = make([]NodePool, len(in.NodePools))
	for i, np := range in.NodePools {
		np.InstanceTypes = slotsOnly(np.InstanceTypes, res.slotsLeft)
		if np.Remaining != nil {
			np.Remaining = np.Remaining.DeepCopy()
			for _, nc := range held[np.Name] {
				for k, q := range nc.InstanceTypes[0].Capacity {
					if r, ok := np.Remaining[k]; ok {
						r.Sub(q)
						np.Remaining[k] = r
					}
				}
				if r, ok := np.Remaining[karpv1.ResourceNodes]; ok {
					r.Sub(*resource.NewQuantity(1, resource.DecimalSI))
					np.Remaining[karpv1.ResourceNodes] = r
				}
			}
		}
		next.NodePools[i] = np
	}
	again := solveOnce(next, opts)
	out := &Result{Unschedulable: again.Unschedulable, slotsLeft: again.slotsLeft, fellBack: again.fellBack}
	for _, b := range again.Bindings {
		i, ok := strings.CutPrefix(b.Node, reservedNodePrefix)
		if !ok {
			out.Bindings = append(out.Bindings, b)
			continue
		}
		n, _ := strconv.Atoi(i)
		nc := pinned[n]
		nc.Pods = append(nc.Pods, b.Pod)
		for k, q := range Requests([]*corev1.Pod{b.Pod}) {
			cur := nc.Requests[k]
			cur.Add(q)
			nc.Requests[k] = cur
		}
	}
	out.NodeClaims = append(pinned, again.NodeClaims...)
	return out
}

// slotsOnly returns its with each reservation's machines set to what slots has left of them
// (none: unavailable).
func slotsOnly(its []*cloudprovider.InstanceType, slots map[string]int) []*cloudprovider.InstanceType {
	return cloudprovider.WithReservationCapacity(its, func(id string, _ int) int { return slots[id] })
}
