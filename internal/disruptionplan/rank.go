package disruptionplan

import (
	"cmp"
	"math"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
)

// Deletion-cost bands: every value of a band is below every value of the next, so a ReplicaSet
// that scales in deletes the pods of nodes being disrupted first, then those of drifted nodes,
// then those of the other nodes in the order consolidation would take them.
const (
	// DeletionCostDisrupting is the value for pods of nodes already being disrupted (deleted or
	// tainted karpenter.sh/disrupted): the lowest int32.
	DeletionCostDisrupting int32 = math.MinInt32
	// DeletionCostDrifted is the first value of drifted nodes, in the order drift replaces them.
	DeletionCostDrifted int32 = -2_000_000_000
	// DeletionCostConsolidation is the first value of the other nodes, in consolidation order.
	DeletionCostConsolidation int32 = -1_000_000_000
)

// DeletionCosts ranks the snapshot's nodes by how soon disruption would remove them and returns,
// per node name, the controller.kubernetes.io/pod-deletion-cost to give the ReplicaSet pods
// there (lower goes first): a scale-in then deletes pods where Capstan wants machines empty, and
// emptiness removes those machines without an eviction. Nodes absent from the map are ones no
// voluntary method would remove (do-not-disrupt on the node or one of its pods, consolidateAfter
// Never and not drifted, not yet initialized, not Ready, not managed): their pods get no value,
// which the ReplicaSet controller reads as 0, after every ranked node.
//
// Within the consolidation band the order is the planned nodes first (the ones a command in
// flight expects to remove next), then least used first (as consolidation takes them; use to
// 1/10,000), then oldest first, then name. Every node gets its own value, so that nodes of equal
// use are emptied one after the other rather than all thinned. Budgets are not applied: they pace
// the removals, while a scale-in needs none. A node's value follows from its own use (and its
// place among nodes of the same use), so a node emptied, added or removed changes no other
// node's value. The drifted band counts up from its base in drift order.
func DeletionCosts(snap *Snapshot, opts Options) map[string]int32 {
	d := newDecider(snap, opts)
	out := map[string]int32{}
	for _, n := range d.inProgress {
		if !n.NodeClaim.DeletionTimestamp.IsZero() || !n.Node.DeletionTimestamp.IsZero() || nodeclaims.Disrupted(n.Node) {
			out[n.Name()] = DeletionCostDisrupting
		}
	}
	var drifted, rest []*Candidate
	for _, c := range d.all {
		switch {
		case c.blocked.Kind == KindDoNotDisrupt || c.Empty():
		case meta.IsStatusConditionTrue(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeDrifted):
			drifted = append(drifted, c)
		case c.Pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration != nil:
			rest = append(rest, c)
		}
	}
	slices.SortStableFunc(drifted, driftOrder)
	slices.SortStableFunc(rest, func(a, b *Candidate) int {
		pa, pb := nodeclaims.Planned(a.Node.Node), nodeclaims.Planned(b.Node.Node)
		if pa != pb {
			if pa {
				return -1
			}
			return 1
		}
		return cmp.Or(cmp.Compare(useStep(a), useStep(b)),
			a.NodeClaim.CreationTimestamp.Compare(b.NodeClaim.CreationTimestamp.Time), cmp.Compare(a.Name(), b.Name()))
	})
	for i, c := range drifted {
		out[c.Name()] = DeletionCostDrifted + int32(i)
	}
	// A node's value in this band depends on its own use, not on its place among the others:
	// when a scale-in empties one node, or a node joins or leaves, the other nodes keep their
	// values. With values by place, one node moving shifted every node after it by one, and
	// while those pods were rewritten (at a bounded rate) a node's new value equalled the next
	// node's old one: a ReplicaSet scaling in meanwhile took pods of both, thinning machines
	// instead of emptying them. Nodes of the same use (to 1/utilizationSteps) are told apart by
	// their place among themselves, oldest first, so that a node joining them (the newest) moves
	// none of them.
	slot := map[int32]int32{}
	for _, c := range rest {
		v := DeletionCostConsolidation
		if !nodeclaims.Planned(c.Node.Node) {
			v += deletionCostUnplanned
		}
		v += useStep(c) * tieSlots
		out[c.Name()] = v + min(slot[v], tieSlots-1)
		slot[v]++
	}
	return out
}

// useStep is the candidate's use in steps of 1/utilizationSteps.
func useStep(c *Candidate) int32 {
	return int32(math.Floor(min(max(c.Utilization, 0), 1) * utilizationSteps))
}

// The consolidation band's layout (DeletionCosts): planned nodes from DeletionCostConsolidation,
// the others from DeletionCostConsolidation + deletionCostUnplanned; within each, the node's use
// in steps of 1/utilizationSteps, tieSlots values per step.
const (
	utilizationSteps      = 10_000
	tieSlots              = 10_000
	deletionCostUnplanned = 200_000_000
)
