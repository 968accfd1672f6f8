package disruptionplan_test

import (
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
)

// A budget of one node lets one light node go now (the spot node, which only a spot machine
// could replace, stays); the decision plans the other light node and
// the node a scale-down just emptied (not consolidatable yet) for later rounds, and the pods that
// move now go to the node that stays. (The wait for scale-downs in progress, which would hold the
// round back while the emptied node waits for emptiness, is off: this is about planning.)
func TestPlannedNodesAreWhereLaterRoundsGo(t *testing.T) {
	build := func() *cluster {
		c := newCluster(t)
		c.pool("default", func(np *karpv1.NodePool) { np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "1"}} })
		empty := c.node("default", "emptied", "l", karpv1.CapacityTypeOnDemand)
		meta.RemoveStatusCondition(&empty.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
		c.node("default", "a", "m", karpv1.CapacityTypeOnDemand, pods("a", 2, "1")...)
		c.node("default", "b", "m", karpv1.CapacityTypeOnDemand, pods("b", 2, "1")...)
		c.node("default", "big", "xl", karpv1.CapacityTypeSpot, pods("big", 10, "1")...)
		return c
	}
	landsOn := func(cmd *disruptionplan.Command) []string {
		var out []string
		for _, b := range cmd.Bindings {
			if !slices.Contains(out, b.Node) {
				out = append(out, b.Node)
			}
		}
		slices.Sort(out)
		return out
	}

	d := build().decide(disruptionplan.Options{DisableScaleDownWait: true})
	if d.Command == nil || len(d.Command.Candidates) != 1 {
		t.Fatalf("command = %v, want one node (budget 1)", names(d.Command))
	}
	var planned []string
	for _, n := range d.Planned {
		planned = append(planned, n.Name())
	}
	slices.Sort(planned)
	other := "b"
	if names(d.Command)[0] == "b" {
		other = "a"
	}
	if want := []string{other, "emptied"}; !slices.Equal(planned, want) {
		t.Errorf("planned = %v, want %v", planned, want)
	}
	if got := landsOn(d.Command); !slices.Equal(got, []string{"big"}) {
		t.Errorf("moving pods land on %v, want only the node that stays", got)
	}

	// Without planning the same pods fill the first node with room but the empty one (every
	// simulation tries empty nodes after the others: a pod put there keeps a machine emptiness
	// would remove): the other light node, which a later round removes.
	off := build().decide(disruptionplan.Options{DisablePlanning: true, DisableScaleDownWait: true})
	offOther := "b"
	if names(off.Command)[0] == "b" {
		offOther = "a"
	}
	if got := landsOn(off.Command); len(off.Planned) != 0 || slices.Contains(got, "emptied") || !slices.Contains(got, offOther) {
		t.Errorf("without planning: planned %d, pods land on %v; want none planned, the emptied node unused and %s used", len(off.Planned), got, offOther)
	}
}

// Planning looks past budgets only: with room in the budget, multi-node consolidation already
// took what it could, and only empty nodes are planned.
func TestNothingPlannedBeyondAnOpenBudget(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "a", "m", karpv1.CapacityTypeOnDemand, pods("a", 2, "1")...)
	c.node("default", "b", "m", karpv1.CapacityTypeOnDemand, pods("b", 2, "1")...)
	c.node("default", "big", "xl", karpv1.CapacityTypeSpot, pods("big", 10, "1")...)
	d := c.decide(disruptionplan.Options{})
	if got := names(d.Command); len(got) != 2 {
		t.Fatalf("command = %v, want a and b together", got)
	}
	if len(d.Planned) != 0 {
		t.Errorf("planned %d nodes, want none", len(d.Planned))
	}
}
