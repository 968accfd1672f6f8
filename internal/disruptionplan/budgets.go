package disruptionplan

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Allowance is how many more of a pool's nodes a reason may disrupt now, and which budget
// decides it.
type Allowance struct {
	// Allowed is the most restrictive active budget's node count less the nodes already being
	// disrupted, never below zero; math.MaxInt32 when no budget applies.
	Allowed int
	// Budget is the index of the deciding budget in spec.disruption.budgets, or -1.
	Budget int
	// Limit is that budget's node count before subtracting the nodes being disrupted.
	Limit int
	// Until is when the deciding budget's schedule window closes (zero without a schedule).
	Until time.Time
	// Err is set when a budget cannot be read; such a budget allows nothing (fail closed).
	Err error
}

// PoolAllowance is how many more of the pool's nodes the reason may disrupt now, given its node
// count and the nodes already being disrupted: the decision core's budget rule, for the
// controllers that disrupt outside it (static pools' drift).
func PoolAllowance(np *karpv1.NodePool, reason karpv1.DisruptionReason, now time.Time, nodes, disrupting int) Allowance {
	return allowance(np, reason, now, nodes, disrupting)
}

// allowance computes the pool's allowance for the reason, given its node count and the nodes
// already being disrupted.
func allowance(np *karpv1.NodePool, reason karpv1.DisruptionReason, now time.Time, nodes, disrupting int) Allowance {
	a := Allowance{Allowed: math.MaxInt32, Limit: math.MaxInt32, Budget: -1}
	for i, b := range np.Spec.Disruption.Budgets {
		if len(b.Reasons) > 0 && !slices.Contains(b.Reasons, reason) {
			continue
		}
		active, until, err := budgetActive(&b, now)
		if err != nil {
			a.Err = fmt.Errorf("budget %d of NodePool %s: %w", i, np.Name, err)
			a.Limit, a.Budget, a.Until = 0, i, time.Time{}
			break
		}
		if !active {
			continue
		}
		n, err := budgetNodes(b.Nodes, nodes)
		if err != nil {
			a.Err = fmt.Errorf("budget %d of NodePool %s: %w", i, np.Name, err)
			a.Limit, a.Budget, a.Until = 0, i, time.Time{}
			break
		}
		if n < a.Limit {
			a.Limit, a.Budget, a.Until = n, i, until
		}
	}
	a.Allowed = a.Limit
	if a.Limit != math.MaxInt32 {
		a.Allowed = max(0, a.Limit-disrupting)
	}
	return a
}

// budgetActive reports whether the budget applies at now: always without a schedule, else within
// duration of a scheduled start. until is when the window closes.
func budgetActive(b *karpv1.Budget, now time.Time) (bool, time.Time, error) {
	if b.Schedule == nil {
		return true, time.Time{}, nil
	}
	if b.Duration == nil {
		return false, time.Time{}, fmt.Errorf("schedule %q has no duration", *b.Schedule)
	}
	s, err := ParseSchedule(*b.Schedule)
	if err != nil {
		return false, time.Time{}, err
	}
	active, until := s.ActiveWindow(now, b.Duration.Duration)
	return active, until, nil
}

// budgetNodes reads a budget's nodes value: a count, or a percentage of the pool's nodes rounded
// up (as Kubernetes rounds a PDB's maxUnavailable, and Karpenter a budget).
func budgetNodes(v string, nodes int) (int, error) {
	if v == "" {
		v = "10%"
	}
	if p, ok := strings.CutSuffix(v, "%"); ok {
		pct, err := strconv.Atoi(p)
		if err != nil || pct < 0 || pct > 100 {
			return 0, fmt.Errorf("nodes %q is not a percentage from 0%% to 100%%", v)
		}
		return (pct*nodes + 99) / 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("nodes %q is not a count or a percentage", v)
	}
	return n, nil
}

// describe says which budget blocks a disruption for the reason, for events; used is how many of
// the pool's nodes are being disrupted or already chosen.
func (a Allowance) describe(np *karpv1.NodePool, reason karpv1.DisruptionReason, used int) string {
	if a.Err != nil {
		return fmt.Sprintf("a budget is unreadable, so nothing is disrupted for %s (%v)", reason, a.Err)
	}
	b := np.Spec.Disruption.Budgets[a.Budget]
	s := fmt.Sprintf("budget nodes=%s for %s", b.Nodes, reason)
	if !a.Until.IsZero() {
		s += " until " + a.Until.UTC().Format("15:04 UTC")
	}
	if a.Limit > 0 {
		s += fmt.Sprintf(" (%d at once; %d already being disrupted)", a.Limit, used)
	}
	return s
}
