package disruption

import (
	"fmt"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// BalancedK is the k of the Balanced policy: a move passes when the fraction of the pool's cost it
// saves, divided by the fraction of the pool's disruption cost it spends, is at least 1/k.
const BalancedK = 2

// Score is a move scored for a Balanced pool.
type Score struct {
	// SavingsFraction is the move's saving over the pool's hourly cost.
	SavingsFraction float64
	// DisruptionFraction is the move's disruption cost over the pool's total disruption cost
	// (every node 1, plus each of its pods' EvictionCost).
	DisruptionFraction float64
}

// Value is SavingsFraction / DisruptionFraction.
func (s Score) Value() float64 {
	if s.DisruptionFraction <= 0 {
		return 0
	}
	return s.SavingsFraction / s.DisruptionFraction
}

// Approved reports whether the score reaches 1/BalancedK.
func (s Score) Approved() bool { return s.Value() >= 1.0/BalancedK }

// String is the score as events say it.
func (s Score) String() string {
	op := "<"
	if s.Approved() {
		op = ">="
	}
	return fmt.Sprintf("saving %.1f%% of the pool for %.1f%% of its disruption (score %.2f %s %.2f)",
		100*s.SavingsFraction, 100*s.DisruptionFraction, s.Value(), op, 1.0/BalancedK)
}

// score scores saving money at the given disruption cost in the pool.
func (d *decider) score(pool string, savings, disruption float64) Score {
	var s Score
	if c := d.poolCost[pool]; c > 0 {
		s.SavingsFraction = savings / c
	}
	if t := d.poolDisruption[pool]; t > 0 {
		s.DisruptionFraction = disruption / t
	}
	return s
}

// balanced scores the command in each Balanced pool it disrupts (a pool's share of the saving is
// its share of the candidates' price) and says why it is rejected, or "".
func (d *decider) balanced(cmd *Command) string {
	price, disruption := map[string]float64{}, map[string]float64{}
	for _, c := range cmd.Candidates {
		if c.Pool.NodePool.Spec.Disruption.ConsolidationPolicy != karpv1.ConsolidationPolicyBalanced {
			continue
		}
		price[c.Pool.NodePool.Name] += c.Price
		disruption[c.Pool.NodePool.Name] += c.DisruptionCost
	}
	for pool := range price {
		share := cmd.Savings()
		if cmd.PriceBefore > 0 {
			share *= price[pool] / cmd.PriceBefore
		}
		s := d.score(pool, share, disruption[pool])
		if cmd.Scores == nil {
			cmd.Scores = map[string]Score{}
		}
		cmd.Scores[pool] = s
		if !s.Approved() {
			return fmt.Sprintf("Balanced: %s in NodePool %s", s, pool)
		}
	}
	return ""
}

// balancedBound says why no move of the candidate alone can pass its Balanced pool, or "": the
// best move deletes it without a replacement.
func (d *decider) balancedBound(c *Candidate) string {
	if c.Pool.NodePool.Spec.Disruption.ConsolidationPolicy != karpv1.ConsolidationPolicyBalanced {
		return ""
	}
	s := d.score(c.Pool.NodePool.Name, c.Price, c.DisruptionCost)
	if s.Approved() {
		return ""
	}
	return fmt.Sprintf("Balanced: even deleting it outright would be %s", s)
}
