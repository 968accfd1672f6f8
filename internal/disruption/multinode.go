package disruption

import (
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// multiNode looks for the set of two or more nodes whose removal, with at most one cheaper
// replacement, saves the most it can find. It first searches the longest workable prefix of the
// candidates in consolidation order (as Karpenter does), then grows the best set greedily by every
// other candidate that still fits and saves more: a combination that skips a candidate whose pods
// fit nowhere is found too. The search stops at MultiNodeSolves simulations or MultiNodeTimeout.
func (d *decider) multiNode() *Command {
	var cands []*Candidate
	for _, c := range d.consolidationCandidates() {
		if d.balancedBound(c) == "" && d.out.Allowances[c.Pool.NodePool.Name][karpv1.DisruptionReasonUnderutilized].Allowed > 0 {
			cands = append(cands, c)
		}
	}
	if len(cands) < 2 {
		return nil
	}
	// The prefix that budgets allow, at most MaxMultiNodeCandidates.
	prefix := make([]*Candidate, 0, min(len(cands), MaxMultiNodeCandidates))
	for _, c := range cands {
		if len(prefix) == MaxMultiNodeCandidates {
			break
		}
		if d.withinBudgets(append(prefix[:len(prefix):len(prefix)], c), karpv1.DisruptionReasonUnderutilized) {
			prefix = append(prefix, c)
		}
	}
	budget := d.opts.MultiNodeSolves
	spent := func() bool { return budget <= 0 || d.outOfTime(d.opts.MultiNodeTimeout) }
	try := func(set []*Candidate) *Command {
		budget--
		cmd, _ := d.consolidate(MethodMultiNode, set)
		return cmd
	}
	var best *Command
	lo, hi := 2, len(prefix)
	for lo <= hi && !spent() {
		mid := (lo + hi) / 2
		if cmd := try(prefix[:mid]); cmd != nil {
			best, lo = cmd, mid+1
		} else {
			hi = mid - 1
		}
	}
	set := []*Candidate{}
	if best != nil {
		set = best.Candidates
	}
	in := map[*Candidate]bool{}
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
		ok := d.withinBudgets(grown, karpv1.DisruptionReasonUnderutilized)
		if ok {
			cmd := try(grown)
			// A single node is single-node consolidation's; it only seeds the set.
			ok = cmd != nil && (len(grown) == 1 || best == nil || cmd.Savings() > best.Savings())
			if ok && len(grown) > 1 {
				best = cmd
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
	if best == nil || len(best.Candidates) < 2 {
		return nil
	}
	return best
}
