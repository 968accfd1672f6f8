package disruptionplan

import (
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// BalancedK is the k of the Balanced policy: a move passes when the fraction of the pool's cost it
// saves, divided by the fraction of the pool's disruption cost it spends, is at least 1/k.
const BalancedK = 2

// DefaultUnderutilizedK is the k Capstan gives WhenEmptyOrUnderutilized pools (Options.UnderutilizedK):
// their moves must score at least 1/3, a looser bar than Balanced's 1/2. Karpenter takes every
// saving under that policy; the replacements it takes that this bar refuses (a node replaced by
// one 10% cheaper, moving all its pods, then again an hour later) made the replayed day dearer,
// not cheaper (docs/disruption.md, "Moves priced against savings").
const DefaultUnderutilizedK = 3

// CalmK is the k of a consolidation (WhenEmptyOrUnderutilized or Balanced) that evicts pods of an
// owner seen shrinking within Options.CalmAfterScaleDown: such a move must save at least four
// times the share of the pool's cost that it spends of the pool's disruption. Of the bars tried
// on five replayed days under WhenEmptyOrUnderutilized (1/2, 1, 2, 4 and never), 4 ended the days
// cheapest and calmest; under Balanced it is stricter than Karpenter's 1/2, never looser, and
// made the same days 8% cheaper with 58% fewer evictions (docs/benchmarks.md, "A falling load's
// bar").
const CalmK = 0.25

// ChurnK is the k of a consolidation that moves a pod again within Options.EvictionMemory of a
// consolidation moving it (the churn guard), when its pool scores its moves: such a move must save
// ten times the share of the pool's cost that it spends of the pool's disruption. A hard block
// let a machine that a burst had bought, and whose pods were moved onto it as it emptied (the
// kube-scheduler places pods on the least allocated node), stay for the rest of a replayed day at
// a third of the pool's price; of the bars tried on five replayed days (4, 6, 8, 10, 12, 16 and
// 32), 8 to 12 ended the days cheaper and calmer than the block under both scored policies, and
// 10 cheapest (docs/benchmarks.md, "The churn guard's bar"). Pools whose moves are not scored
// (WhenEmptyOrUnderutilized with k off) keep the block.
const ChurnK = 0.1

// Score is a move scored for a pool.
type Score struct {
	// Policy is the pool's consolidation policy, K its k: the score passes at 1/K.
	Policy karpv1.ConsolidationPolicy
	K      float64
	// SavingsFraction is the move's saving over the pool's hourly cost.
	SavingsFraction float64
	// DisruptionFraction is the move's disruption cost over the pool's total disruption cost
	// (every node 1, plus each of its pods' EvictionCost).
	DisruptionFraction float64
	// Calm says why K is stricter than the pool's ("" when it is the pool's): the move evicts
	// pods of an owner seen shrinking within Options.CalmAfterScaleDown (CalmK), or moves again a
	// pod that a consolidation moved within Options.EvictionMemory (ChurnK).
	Calm string
}

// Value is SavingsFraction / DisruptionFraction.
func (s Score) Value() float64 {
	if s.DisruptionFraction <= 0 {
		return 0
	}
	return s.SavingsFraction / s.DisruptionFraction
}

// Approved reports whether the score reaches 1/K.
func (s Score) Approved() bool { return s.Value() >= 1.0/s.K }

// String is the score as events say it.
func (s Score) String() string {
	op := "<"
	if s.Approved() {
		op = ">="
	}
	calm := ""
	if s.Calm != "" {
		calm = ", " + s.Calm
	}
	return fmt.Sprintf("saving %.1f%% of the pool for %.1f%% of its disruption (score %.2f %s %.2f%s)",
		100*s.SavingsFraction, 100*s.DisruptionFraction, s.Value(), op, 1.0/s.K, calm)
}

// k is the pool's k, or 0 when its moves are not scored (WhenEmpty, or WhenEmptyOrUnderutilized
// with the score turned off).
func (d *decider) k(p *Pool) float64 {
	switch p.NodePool.Spec.Disruption.ConsolidationPolicy {
	case karpv1.ConsolidationPolicyBalanced:
		return BalancedK
	case karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized:
		return max(d.opts.UnderutilizedK, 0)
	}
	return 0
}

// candidateK is k for a move that disrupts c, and why it is stricter than its pool's ("" when it
// is not): its pool's k; if the pool scores its moves (Balanced, or WhenEmptyOrUnderutilized with
// its score on), ChurnK when c holds a pod a consolidation moved within EvictionMemory, else
// CalmK when it holds pods of an owner seen shrinking within CalmAfterScaleDown.
func (d *decider) candidateK(c *Candidate) (float64, string) {
	k := d.k(c.Pool)
	if k <= 0 {
		return k, ""
	}
	if c.movedAgain != "" {
		return min(k, ChurnK), "the bar for moving a pod again: " + c.movedAgain
	}
	for _, p := range c.Reschedulable {
		if ref := metav1.GetControllerOf(p); ref != nil && d.shrunk[ref.UID] {
			return min(k, CalmK), "the bar while an owner of its pods is scaling down"
		}
	}
	return k, ""
}

// score scores saving money at the given disruption cost in the pool, passing at 1/k; calm says
// why k is stricter than the pool's.
func (d *decider) score(p *Pool, k float64, calm string, savings, disruption float64) Score {
	s := Score{Policy: p.NodePool.Spec.Disruption.ConsolidationPolicy, K: k}
	if k < d.k(p) {
		s.Calm = calm
	}
	if c := d.poolCost[p.NodePool.Name]; c > 0 {
		s.SavingsFraction = savings / c
	}
	if t := d.poolDisruption[p.NodePool.Name]; t > 0 {
		s.DisruptionFraction = disruption / t
	}
	return s
}

// scoreKind is the blocker kind of a move its pool's score refuses.
func scoreKind(policy karpv1.ConsolidationPolicy) string {
	if policy == karpv1.ConsolidationPolicyBalanced {
		return KindBalanced
	}
	return KindSaving
}

// priced scores the command in each pool it disrupts whose moves are scored (a pool's share of
// the saving is its share of the candidates' price), records the scores, and says why the
// command is refused: the first pool by name whose score fails.
func (d *decider) priced(cmd *Command) Blocker {
	type share struct {
		pool              *Pool
		k                 float64
		calm              string
		price, disruption float64
		evictions         int
	}
	shares := map[string]*share{}
	for _, c := range cmd.Candidates {
		if d.k(c.Pool) <= 0 {
			continue
		}
		sh := shares[c.Pool.NodePool.Name]
		if sh == nil {
			sh = &share{pool: c.Pool, k: d.k(c.Pool)}
			shares[c.Pool.NodePool.Name] = sh
		}
		if k, calm := d.candidateK(c); k < sh.k {
			sh.k, sh.calm = k, calm
		}
		sh.price += c.Price
		sh.disruption += c.DisruptionCost
		sh.evictions += len(c.Reschedulable)
	}
	for _, name := range slices.Sorted(maps.Keys(shares)) {
		sh := shares[name]
		saving := cmd.Savings()
		if cmd.PriceBefore > 0 {
			saving *= sh.price / cmd.PriceBefore
		}
		s := d.score(sh.pool, sh.k, sh.calm, saving, sh.disruption)
		if cmd.Scores == nil {
			cmd.Scores = map[string]Score{}
		}
		cmd.Scores[name] = s
		if !s.Approved() {
			return Blocker{scoreKind(s.Policy), fmt.Sprintf("%s: saving %s is too small for %d eviction(s): %s in NodePool %s",
				s.Policy, fmtPrice(saving), sh.evictions, s, name)}
		}
	}
	return Blocker{}
}

// pricedBound says why no move of the candidate alone can pass its pool's score: the best move
// deletes it without a replacement.
func (d *decider) pricedBound(c *Candidate) (Blocker, bool) {
	if d.k(c.Pool) <= 0 {
		return Blocker{}, false
	}
	k, calm := d.candidateK(c)
	s := d.score(c.Pool, k, calm, c.Price, c.DisruptionCost)
	if s.Approved() {
		return Blocker{}, false
	}
	return Blocker{scoreKind(s.Policy), fmt.Sprintf("%s: even deleting it outright would be %s, too little for %d eviction(s)",
		s.Policy, s, len(c.Reschedulable))}, true
}
