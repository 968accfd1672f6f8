package disruptionplan

import (
	"slices"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/solver"
)

// multiNode looks for the set of two or more nodes whose removal, with at most one cheaper
// replacement, saves the most it can find. It first searches the longest workable prefix of the
// candidates in consolidation order (as Karpenter does), then grows the best set greedily by every
// other candidate that still fits and saves more: a combination that skips a candidate whose pods
// fit nowhere is found too. The search stops at MultiNodeSolves simulations or MultiNodeTimeout.
func (d *decider) multiNode() *Command {
	var cands []*Candidate
	for _, c := range d.consolidationCandidates() {
		if _, bounded := d.pricedBound(c); !bounded && d.out.Allowances[c.Pool.NodePool.Name][karpv1.DisruptionReasonUnderutilized].Allowed > 0 {
			cands = append(cands, c)
		}
	}
	if len(cands) < 2 {
		return nil
	}
	best := d.search(nil, nil, cands, true, d.opts.MultiNodeSolves)
	if best == nil || len(best.Candidates) < 2 {
		return nil
	}
	return best
}

// search looks for the largest set that begins with seed (whose command is top, nil when seed is
// empty) and adds candidates from cands, in order, whose removal consolidation can do and which
// saves more than any smaller set: a binary search over the longest workable prefix, then growth
// by chunks of the other candidates. With budgeted, sets stay within the Underutilized budgets.
// It spends at most solves simulations (and MultiNodeTimeout), and returns the best command found.
func (d *decider) search(seed []*Candidate, top *Command, cands []*Candidate, budgeted bool, solves int) *Command {
	fits := func(set []*Candidate) bool {
		return !budgeted || d.withinBudgets(set, karpv1.DisruptionReasonUnderutilized)
	}
	in := map[*Candidate]bool{}
	for _, c := range seed {
		in[c] = true
	}
	// The prefix that budgets allow, at most MaxMultiNodeCandidates.
	prefix := append(make([]*Candidate, 0, min(len(seed)+len(cands), MaxMultiNodeCandidates)), seed...)
	for _, c := range cands {
		if len(prefix) == MaxMultiNodeCandidates {
			break
		}
		if !in[c] && fits(append(prefix[:len(prefix):len(prefix)], c)) {
			prefix = append(prefix, c)
		}
	}
	spent := func() bool { return solves <= 0 || d.outOfTime(d.opts.MultiNodeTimeout) }
	try := func(set []*Candidate) *Command {
		solves--
		cmd, _ := d.consolidate(MethodMultiNode, set)
		return cmd
	}
	lo, hi := max(2, len(seed)+1), len(prefix)
	for lo <= hi && !spent() {
		mid := (lo + hi) / 2
		if cmd := try(prefix[:mid]); cmd != nil {
			top, lo = cmd, mid+1
		} else {
			hi = mid - 1
		}
	}
	set := seed
	if top != nil {
		set = top.Candidates
	}
	clear(in)
	for _, c := range set {
		in[c] = true
	}
	var rest []*Candidate
	for _, c := range cands {
		if !in[c] {
			rest = append(rest, c)
		}
	}
	// Grow by chunks of the remaining candidates, doubling the chunk after a success and halving
	// it after a failure; a candidate that fails alone is skipped. An easy cluster takes a few
	// simulations, a hard one about one per candidate.
	chunk := 1
	for len(rest) > 0 && !spent() && len(set) < MaxMultiNodeCandidates {
		k := min(chunk, len(rest), MaxMultiNodeCandidates-len(set))
		grown := append(set[:len(set):len(set)], rest[:k]...)
		ok := fits(grown)
		if ok {
			cmd := try(grown)
			// A single node is single-node consolidation's; it only seeds the set.
			ok = cmd != nil && (len(grown) == 1 || top == nil || cmd.Savings() > top.Savings())
			if ok && len(grown) > 1 {
				top = cmd
			}
		}
		switch {
		case ok:
			set, rest = grown, rest[k:]
			chunk *= 2
		case k > 1:
			chunk = max(1, k/2)
		default:
			rest = rest[1:]
		}
	}
	return top
}

// planSolves bounds the simulations of the look past budgets.
const planSolves = 24

// planAhead records, as Planned, the nodes later rounds are expected to remove while the command
// moves pods: empty nodes (emptiness takes them once consolidateAfter has passed) and, when
// budgets held the consolidation back, the nodes its set grows by when searched as multi-node
// consolidation would with no budget. The command's pods are then simulated onto the other nodes
// first. Without it the scheduler, which spreads pods to the least allocated nodes, puts the pods
// of one round on the nodes the next rounds remove — a node just emptied by a scale-down first —
// and they move again (or, behind the churn guard, keep those nodes for an hour).
func (d *decider) planAhead(cmd *Command) {
	in := map[*Candidate]bool{}
	for _, c := range cmd.Candidates {
		in[c] = true
	}
	var planned []*Candidate
	for _, c := range d.all {
		if !in[c] && d.willEmpty(c) {
			planned = append(planned, c)
		}
	}
	last := map[int]bool{}
	d.sim.last = last
	defer func() { d.sim.last = nil }()
	mark := func(cs []*Candidate) {
		for _, c := range cs {
			if i, ok := d.sim.index[c.Node]; ok {
				last[i] = true
			}
		}
	}
	mark(planned)
	if d.heldByBudget(cmd) {
		var cands []*Candidate
		for _, c := range d.consolidationCandidates() {
			if _, bounded := d.pricedBound(c); !bounded {
				cands = append(cands, c)
			}
		}
		// The empty nodes are part of the plan: their room is not counted on.
		seed := append(slices.Clip(cmd.Candidates), planned...)
		if grown := d.search(seed, cmd, cands, false, planSolves); grown != nil && len(grown.Candidates) > len(seed) {
			more := grown.Candidates[len(seed):]
			planned = append(planned, more...)
			mark(more)
		}
	}
	if len(planned) == 0 {
		return
	}
	names := map[string]bool{}
	for _, c := range planned {
		d.out.Planned = append(d.out.Planned, c.Node)
		names[c.Name()] = true
	}
	// Bindings only tell replays and explanations where pods go: simulate again only when some
	// land on a planned node, and keep the command when its pods need those nodes.
	if !slices.ContainsFunc(cmd.Bindings, func(b solver.Binding) bool { return names[b.Node] }) {
		return
	}
	if again, _ := d.consolidate(cmd.Method, cmd.Candidates); again != nil && len(again.Replacements) == len(cmd.Replacements) {
		d.out.Command = again
	}
}

// heldByBudget reports whether an Underutilized budget kept the command from taking more nodes
// of one of its pools.
func (d *decider) heldByBudget(cmd *Command) bool {
	chosen := map[string]int{}
	for _, c := range cmd.Candidates {
		chosen[c.Pool.NodePool.Name]++
	}
	for name, n := range chosen {
		if n >= d.out.Allowances[name][karpv1.DisruptionReasonUnderutilized].Allowed {
			return true
		}
	}
	return false
}
