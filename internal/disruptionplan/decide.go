package disruptionplan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/solver"
)

// Method is a way of disrupting nodes; methods are tried in the order of Methods.
type Method string

// Methods, in the order a decision tries them: the first that yields a command acts.
const (
	// MethodRepair replaces unhealthy nodes (the NodeRepair gate).
	MethodRepair Method = "Repair"
	// MethodEmptiness deletes consolidatable nodes that no reschedulable pod uses.
	MethodEmptiness Method = "Emptiness"
	// MethodDrift replaces nodes whose NodeClaim is Drifted.
	MethodDrift Method = "Drift"
	// MethodMultiNode deletes several nodes, launching at most one cheaper replacement.
	MethodMultiNode Method = "MultiNodeConsolidation"
	// MethodSingleNode deletes one node, or replaces it with one cheaper machine.
	MethodSingleNode Method = "SingleNodeConsolidation"
)

// Methods is the order in which a decision tries the methods.
var Methods = []Method{MethodRepair, MethodEmptiness, MethodDrift, MethodMultiNode, MethodSingleNode}

// Command is what a decision asks the controller to do: launch the replacements, wait until
// they are ready, then delete the candidates' NodeClaims.
type Command struct {
	// Method made the command; Reason is its disruption reason (budgets are per reason).
	Method Method
	Reason karpv1.DisruptionReason
	// Candidates are the nodes to disrupt.
	Candidates []*Candidate
	// Replacements are the machines to launch first; their pods are the ones they will take.
	Replacements []*solver.PlannedNodeClaim
	// Bindings are where the simulation put the other moving pods: existing nodes (an in-flight
	// NodeClaim's name is prefixed "nodeclaim/"). The controller does not bind them (the
	// scheduler does); replays and the explain tools read them.
	Bindings []solver.Binding
	// PriceBefore is the candidates' hourly price, PriceAfter the replacements' (cheapest
	// offering each), both with the pools' per-node costs.
	PriceBefore, PriceAfter float64
	// Scores are the command's scores (saving against disruption), per pool it disrupts whose
	// moves are scored (Balanced, and WhenEmptyOrUnderutilized unless its score is turned off).
	Scores map[string]Score
	// Unhealthy is, for a repair, the node condition it repairs and since when
	// ("KernelReady=False since 10:04:05 UTC").
	Unhealthy string
	// TerminateFirst is set on a drift or repair whose candidate goes before any replacement:
	// its pods' only room is the capacity reservation's machine it holds (terminateFirst).
	TerminateFirst string
}

func (c *Command) terminateFirstNote() string {
	if c.TerminateFirst == "" {
		return ""
	}
	return "; terminating first (" + c.TerminateFirst + ")"
}

// Savings is what the command saves per hour.
func (c *Command) Savings() float64 { return c.PriceBefore - c.PriceAfter }

// Rule says which rule allowed the command, as events and logs tell it: emptiness, the drift, or
// the consolidation's saving against its evictions, with its scores in the pools that score moves.
func (c *Command) Rule() string {
	switch c.Method {
	case MethodEmptiness:
		return "Emptiness: no pods to move"
	case MethodRepair:
		if c.Unhealthy != "" {
			return "Repair: " + c.Unhealthy + c.terminateFirstNote()
		}
		return "Repair: the node is unhealthy" + c.terminateFirstNote()
	case MethodDrift:
		reason := "drifted"
		if len(c.Candidates) > 0 {
			if cond := meta.FindStatusCondition(c.Candidates[0].NodeClaim.Status.Conditions, karpv1.ConditionTypeDrifted); cond != nil && cond.Reason != "" {
				reason = cond.Reason
			}
		}
		return "Drift: " + reason + c.terminateFirstNote()
	}
	share := 0.0
	if c.PriceBefore > 0 {
		share = 100 * c.Savings() / c.PriceBefore
	}
	rule := fmt.Sprintf("saves %s (%.0f%% of the candidates' price) for %d eviction(s)", fmtPrice(c.Savings()), share, len(c.Pods()))
	if len(c.Scores) == 0 {
		return "WhenEmptyOrUnderutilized: " + rule
	}
	for _, pool := range slices.Sorted(maps.Keys(c.Scores)) {
		rule += fmt.Sprintf("; %s in NodePool %s: %s", c.Scores[pool].Policy, pool, c.Scores[pool])
	}
	return rule
}

// Pods are the pods the command evicts.
func (c *Command) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, cand := range c.Candidates {
		out = append(out, cand.Reschedulable...)
	}
	return out
}

// Explanation says why a node was not disrupted.
type Explanation struct {
	// Node is the node.
	Node *Node
	// Event is the event reason (EventDisruptionBlocked, EventUnconsolidatable), or "" for a
	// state a user sees elsewhere (not consolidatable yet), which the controller does not emit.
	Event string
	// Kind is the blocker's kind (Kind… constants); Message names the blocker.
	Kind, Message string
}

// Decision is the result of one round.
type Decision struct {
	// Command is nil when nothing is to be done.
	Command *Command
	// Explanations cover the candidates that were looked at and not disrupted, one each.
	Explanations []Explanation
	// Eligible counts, per reason, the nodes a method could act on before budgets and
	// simulations.
	Eligible map[karpv1.DisruptionReason]int
	// Allowances are, per NodePool and reason, the disruptions budgets allow now.
	Allowances map[string]map[karpv1.DisruptionReason]Allowance
	// Solves counts the solver runs the decision made.
	Solves int
	// Settling says why consolidation waited this round (machines starting, pending pods about
	// to be placed), or "".
	Settling string
	// Planned are the nodes later rounds are expected to remove, set when the command is a
	// consolidation (see planAhead). The controller marks them nodeclaims.PlannedTaint, so that
	// the pods the command moves go to nodes that stay instead of moving twice.
	Planned []*Node
	// KeepPlanned says the marks of an earlier round still stand: the round made no
	// consolidation while nodes being disrupted still have pods to move, or the cluster is
	// settling.
	KeepPlanned bool
}

type decider struct {
	snap  *Snapshot
	opts  Options
	pools map[string]*Pool
	// poolNodes counts each pool's nodes for budgets, disrupting those already being disrupted.
	poolNodes, disrupting map[string]int
	// poolCost and poolDisruption are each pool's hourly cost and disruption cost, for Balanced.
	poolCost, poolDisruption map[string]float64
	// inProgress are nodes being disrupted; their pods move in every simulation.
	inProgress []*Node
	all        []*Candidate
	// pdbs and moved are the snapshot's PodDisruptionBudgets and recent evictions, indexed for
	// block.
	pdbs      *pdbIndex
	moved     *movedPods
	explained map[*Candidate]bool
	sim       *simulation
	out       *Decision
	// shrunk are the owners seen shrinking within CalmAfterScaleDown: a scored consolidation
	// evicting their pods must score 1/CalmK.
	shrunk map[types.UID]bool
	// awaited names, for each replacement whose command's candidates are still there (draining,
	// or waiting for it), one of those candidates: the replacement's pods are still to come.
	awaited map[string]string
	// held are the empty nodes emptiness keeps as destinations this round (keepDestinations).
	held map[*Candidate]bool
}

// Decide runs one round: it tries the methods in order and returns the first command found (or
// none), with an explanation for each candidate it did not disrupt.
func Decide(snap *Snapshot, opts Options) *Decision {
	d := newDecider(snap, opts)
	var emptinessMayAct bool
	d.out.Settling, emptinessMayAct = d.settling()
	for _, m := range Methods {
		if d.out.Settling != "" && m != MethodDrift && m != MethodRepair && !(m == MethodEmptiness && emptinessMayAct) {
			continue
		}
		var cmd *Command
		switch m {
		case MethodRepair:
			cmd = d.repair()
		case MethodEmptiness:
			cmd = d.emptiness()
		case MethodDrift:
			cmd = d.drift()
		case MethodMultiNode:
			cmd = d.multiNode()
		case MethodSingleNode:
			cmd = d.singleNode()
		}
		if cmd != nil {
			d.out.Command = cmd
			break
		}
	}
	switch cmd := d.out.Command; {
	case d.opts.DisablePlanning:
	case cmd != nil && (cmd.Method == MethodMultiNode || cmd.Method == MethodSingleNode):
		d.planAhead(cmd)
	case d.out.Settling != "" || len(d.inProgress) > 0:
		d.out.KeepPlanned = true
	}
	d.out.Solves = d.sim.solves
	return d.out
}

// Validate re-checks a command against a newer snapshot, as the controller does after its
// validation period: the same nodes, by name, must still be candidates for the same method, within
// budgets, and their pods must still fit (a consolidation still cheaper, and still approved by
// Balanced). It returns the command as it stands now, or why it no longer holds.
func Validate(snap *Snapshot, opts Options, cmd *Command) (*Command, string) {
	d := newDecider(snap, opts)
	if cmd.Method == MethodRepair {
		// The node is not Ready, so not among the candidates: the repair is decided again.
		now := d.repair()
		if now == nil || now.Candidates[0].Name() != cmd.Candidates[0].Name() {
			return nil, fmt.Sprintf("node %s no longer needs repair now (healthy again, gone, or held back)", cmd.Candidates[0].Name())
		}
		return now, ""
	}
	if cmd.Method != MethodDrift {
		if why, emptinessMayAct := d.settling(); why != "" && !(cmd.Method == MethodEmptiness && emptinessMayAct) {
			return nil, "the cluster is settling: " + why
		}
	}
	byName := map[string]*Candidate{}
	for _, c := range d.all {
		byName[c.Name()] = c
	}
	set := make([]*Candidate, 0, len(cmd.Candidates))
	for _, old := range cmd.Candidates {
		c := byName[old.Name()]
		switch {
		case c == nil:
			return nil, fmt.Sprintf("node %s is no longer a candidate (gone, being disrupted, or not Ready)", old.Name())
		case c.blocked.Message != "":
			return nil, c.blocked.Message
		case cmd.Method == MethodDrift && !meta.IsStatusConditionTrue(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeDrifted):
			return nil, fmt.Sprintf("node %s is no longer drifted", c.Name())
		case cmd.Method != MethodDrift && c.noConsolidation.Message != "":
			return nil, c.noConsolidation.Message
		case cmd.Method == MethodEmptiness && !c.Empty():
			return nil, fmt.Sprintf("node %s is no longer empty", c.Name())
		}
		set = append(set, c)
	}
	if !d.withinBudgets(set, cmd.Reason) {
		return nil, fmt.Sprintf("budgets no longer allow disrupting %d node(s) for %s", len(set), cmd.Reason)
	}
	switch cmd.Method {
	case MethodEmptiness:
		return newCommand(cmd.Method, cmd.Reason, set, simResult{}), ""
	case MethodDrift:
		if !slices.ContainsFunc(set, func(c *Candidate) bool { return !c.Empty() }) {
			return newCommand(cmd.Method, cmd.Reason, set, simResult{}), ""
		}
		res := d.sim.run(set)
		if res.failed != "" {
			if len(set) == 1 {
				if tf := d.terminateFirst(set[0], cmd.Method, cmd.Reason, d.opts.TerminateFirstDrift); tf != nil {
					return tf, ""
				}
			}
			return nil, res.failed
		}
		return newCommand(cmd.Method, cmd.Reason, set, res), ""
	default:
		out, why := d.consolidate(cmd.Method, set)
		return out, why.Message
	}
}

func newDecider(snap *Snapshot, opts Options) *decider {
	d := &decider{
		snap: snap, opts: opts.withDefaults(), pools: map[string]*Pool{},
		poolNodes: map[string]int{}, disrupting: map[string]int{},
		poolCost: map[string]float64{}, poolDisruption: map[string]float64{},
		explained: map[*Candidate]bool{},
		out:       &Decision{Eligible: map[karpv1.DisruptionReason]int{}, Allowances: map[string]map[karpv1.DisruptionReason]Allowance{}},
	}
	for i := range snap.NodePools {
		p := &snap.NodePools[i]
		d.pools[p.NodePool.Name] = p
	}
	d.awaited = awaitedReplacements(snap.Nodes)
	for _, sd := range snap.ScaleDowns {
		if sd.UID != "" && d.opts.CalmAfterScaleDown > 0 && snap.Now.Sub(sd.At) < d.opts.CalmAfterScaleDown {
			if d.shrunk == nil {
				d.shrunk = map[types.UID]bool{}
			}
			d.shrunk[sd.UID] = true
		}
	}
	d.candidates()
	d.totals()
	for _, p := range snap.NodePools {
		name := p.NodePool.Name
		d.out.Allowances[name] = map[karpv1.DisruptionReason]Allowance{}
		for _, r := range []karpv1.DisruptionReason{karpv1.DisruptionReasonEmpty, karpv1.DisruptionReasonDrifted, karpv1.DisruptionReasonUnderutilized} {
			d.out.Allowances[name][r] = allowance(p.NodePool, r, snap.Now, d.poolNodes[name], d.disrupting[name])
		}
	}
	d.sim = newSimulation(d)
	for _, c := range d.all {
		if c.blocked.Message != "" {
			d.explain(c, EventDisruptionBlocked, c.blocked)
		}
	}
	return d
}

// StartingFor is how long after its NodeClaim was created a machine that has not initialized
// counts as starting. Past it the machine is stuck (a startup taint never removed, a kubelet
// never Ready): it no longer holds consolidation back. (No disruption moves pods onto a machine
// that has not initialized, stuck or not.)
const StartingFor = 15 * time.Minute

// settling says why the cluster is not ready for consolidation: while machines are starting or
// pending pods are about to be placed, the room consolidation would count on is changing under
// it, and a node emptied now is often bought again a minute later. Pending pods that fit nowhere,
// even on new machines, do not hold consolidation back. While a scale-down is in progress
// (shrinking) only underutilisation waits: emptiness may act, which is what the scale-down is for.
func (d *decider) settling() (why string, emptinessMayAct bool) {
	starting := 0
	for _, n := range d.snap.Nodes {
		if d.pools[n.NodeClaim.Labels[karpv1.NodePoolLabelKey]] == nil || !n.NodeClaim.DeletionTimestamp.IsZero() {
			continue
		}
		if (n.Node == nil || !meta.IsStatusConditionTrue(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInitialized)) &&
			d.snap.Now.Sub(n.NodeClaim.CreationTimestamp.Time) < StartingFor {
			starting++
		}
	}
	if starting > 0 {
		return fmt.Sprintf("%d machine(s) are starting", starting), false
	}
	if len(d.snap.Pending) > 0 {
		if placed := d.sim.placeable(); placed > 0 {
			return fmt.Sprintf("%d pending pod(s) are about to be placed", placed), false
		}
	}
	return d.shrinking(), true
}

// terminatingFor is how long after its deletion deadline a terminating pod still says that a
// scale-down is in progress (a pod stuck terminating, on a kubelet gone or behind a finalizer,
// must not hold consolidation back for ever).
const terminatingFor = time.Minute

// shrinking says why a scale-down is in progress, or "": pods of a controller terminating on the
// pools' nodes (a ReplicaSet or StatefulSet deleting replicas, a rollout), an owner seen shrinking
// within ScaleDownWait, or nodes a scale-down just emptied that emptiness will remove once their
// consolidateAfter has passed. Judging underutilisation then would move pods onto room that is
// about to go (the emptied nodes) or away from nodes the scale-down is still thinning, and move
// them again a round later. Pods draining off nodes being disrupted are disruption's own moves,
// which the simulations already count, not a scale-down.
func (d *decider) shrinking() string {
	if d.opts.DisableScaleDownWait {
		return ""
	}
	leaving := map[*Node]bool{}
	for _, n := range d.inProgress {
		leaving[n] = true
	}
	terminating := 0
	for _, n := range d.snap.Nodes {
		if leaving[n] {
			continue
		}
		for _, p := range n.Pods {
			if !p.DeletionTimestamp.IsZero() && metav1.GetControllerOf(p) != nil && !pods.OwnedByDaemonSet(p) &&
				d.snap.Now.Before(p.DeletionTimestamp.Add(terminatingFor)) {
				terminating++
			}
		}
	}
	if terminating > 0 {
		return fmt.Sprintf("a scale-down is in progress: %d pod(s) are terminating", terminating)
	}
	var last *ScaleDown
	var began time.Time
	for i, sd := range d.snap.ScaleDowns {
		if d.snap.Now.Sub(sd.At) >= d.opts.ScaleDownWait {
			continue
		}
		if last == nil || sd.At.After(last.At) {
			last = &d.snap.ScaleDowns[i]
		}
		if began.IsZero() || sd.Since.Before(began) {
			began = sd.Since
		}
	}
	if last != nil && d.snap.Now.Sub(began) < d.opts.MaxScaleDownHold {
		return fmt.Sprintf("a scale-down is in progress: %s shrank at %s; under-used nodes are judged from %s", last.Owner,
			last.At.UTC().Format("15:04:05 UTC"), last.At.Add(d.opts.ScaleDownWait).UTC().Format("15:04:05 UTC"))
	}
	emptied := 0
	for _, c := range d.all {
		if d.willEmpty(c) && !meta.IsStatusConditionTrue(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable) {
			emptied++
		}
	}
	if emptied > 0 {
		return fmt.Sprintf("a scale-down is in progress: %d emptied node(s) wait for consolidateAfter before emptiness removes them", emptied)
	}
	return ""
}

// explain records why the candidate is not disrupted, once: the first reason found stands.
func (d *decider) explain(c *Candidate, event string, why Blocker) {
	if d.explained[c] {
		return
	}
	d.explained[c] = true
	d.out.Explanations = append(d.out.Explanations, Explanation{Node: c.Node, Event: event, Kind: why.Kind, Message: why.Message})
}

// totals sums each pool's hourly cost and disruption cost over its counted nodes.
func (d *decider) totals() {
	for _, c := range d.all {
		d.poolCost[c.Pool.NodePool.Name] += c.Price
		d.poolDisruption[c.Pool.NodePool.Name] += c.DisruptionCost
	}
	for _, n := range d.inProgress {
		pool := d.pools[n.NodeClaim.Labels[karpv1.NodePoolLabelKey]]
		price, _, _ := nodePrice(n, pool)
		d.poolCost[pool.NodePool.Name] += price
		_, cost := moving(n)
		d.poolDisruption[pool.NodePool.Name] += cost
	}
}

// budget tells whether one more node of the pool may be disrupted for the reason, given the
// pool's nodes already chosen; when not, it explains on the candidate.
func (d *decider) budget(c *Candidate, reason karpv1.DisruptionReason, chosen map[string]int) bool {
	name := c.Pool.NodePool.Name
	a := d.out.Allowances[name][reason]
	if chosen[name] < a.Allowed {
		return true
	}
	d.explain(c, EventDisruptionBlocked, Blocker{KindDisruptionBudget, a.describe(c.Pool.NodePool, reason, d.disrupting[name]+chosen[name])})
	return false
}

// withinBudgets reports whether every pool of the set may disrupt that many nodes.
func (d *decider) withinBudgets(set []*Candidate, reason karpv1.DisruptionReason) bool {
	n := map[string]int{}
	for _, c := range set {
		n[c.Pool.NodePool.Name]++
	}
	for name, k := range n {
		if k > d.out.Allowances[name][reason].Allowed {
			return false
		}
	}
	return true
}

// consolidatable reports whether consolidation may look at the candidate, explaining when not.
func (d *decider) consolidatable(c *Candidate) bool {
	if c.blocked.Message != "" {
		return false
	}
	if c.noConsolidation.Message != "" {
		event := EventUnconsolidatable
		if !meta.IsStatusConditionTrue(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable) {
			event = ""
		}
		d.explain(c, event, c.noConsolidation)
		return false
	}
	return true
}

// emptiness deletes, in one command, every consolidatable node without reschedulable pods that
// its pool's Empty budget allows, but those it keeps as destinations (keepDestinations).
func (d *decider) emptiness() *Command {
	chosen := map[string]int{}
	cmd := &Command{Method: MethodEmptiness, Reason: karpv1.DisruptionReasonEmpty}
	for _, c := range d.all {
		if !c.Empty() || c.blocked.Message != "" {
			continue
		}
		if !d.consolidatable(c) {
			continue
		}
		if on := d.sim.bufferOn[c.Name()]; len(on) > 0 {
			d.explain(c, EventDisruptionBlocked, Blocker{KindCapacityBuffer, fmt.Sprintf("empty, but it is the room CapacityBuffer %s keeps", capacitybuffer.Key(on[0]))})
			continue
		}
		d.out.Eligible[karpv1.DisruptionReasonEmpty]++
		if !d.budget(c, karpv1.DisruptionReasonEmpty, chosen) {
			continue
		}
		chosen[c.Pool.NodePool.Name]++
		cmd.Candidates = append(cmd.Candidates, c)
	}
	cmd.Candidates = d.keepDestinations(d.keepArrivals(cmd.Candidates))
	if len(cmd.Candidates) == 0 {
		return nil
	}
	for _, c := range cmd.Candidates {
		cmd.PriceBefore += c.Price
	}
	return cmd
}

// HoldEmptyFor bounds how long emptiness keeps an empty node as a destination
// (keepDestinations): counted from when the node became consolidatable (or its last pod left,
// plus consolidateAfter). Past it the node goes even if the moves it waits for never come (a
// PDB, a budget, a score that keeps refusing them): an empty machine is never kept for good.
const HoldEmptyFor = 10 * time.Minute

// destinationTries bounds the empty nodes keepDestinations weighs in one round.
const destinationTries = 3

// keepDestinations returns the empty nodes emptiness is about to delete less those worth keeping
// as destinations. Deleting an empty node is the easy step; but when the pods of dearer, nearly
// empty nodes fit there and nowhere else, deleting it keeps those dearer nodes for good (no move
// is left that needs no launch, and spot-to-spot replacement is off by default). So for each of
// the cheapest empty nodes emptiness may take now, whether or not this round's budget reaches
// it (at most destinationTries, each within HoldEmptyFor, each cheaper than some node
// consolidation may take), the cluster's end is weighed both ways, as endState weighs
// consolidation's steps: with the node gone, and with it kept (and those kept before it), later
// rounds then removing, in consolidation order, every node whose pods fit on the rest with no
// launch. When keeping it ends cheaper, it stays (with an explanation) and consolidation, once
// the cluster has settled, moves pods onto it under all its calm rules, counting its price
// against the saving (consolidate).
func (d *decider) keepDestinations(empty []*Candidate) []*Candidate {
	var takers []*Candidate
	dearest := 0.0
	for _, c := range d.all {
		if !c.Empty() && c.blocked.Message == "" && c.noConsolidation.Message == "" {
			takers = append(takers, c)
			dearest = max(dearest, c.Price)
		}
	}
	if len(takers) == 0 {
		return empty
	}
	slices.SortStableFunc(takers, consolidationOrder)
	// Every empty node emptiness will take (now, or once its consolidateAfter or budget lets it)
	// is gone in both ends: only the weighed node's room differs. Those it may take now are
	// weighed, not only those this round's budget lets go: the cheapest that serves is the one
	// to keep, wherever the budget stopped.
	var gone, order []*Candidate
	for _, c := range d.all {
		if c.emptinessWillTake() {
			gone = append(gone, c)
			if c.noConsolidation.Message == "" {
				order = append(order, c)
			}
		}
	}
	slices.SortStableFunc(order, func(a, b *Candidate) int {
		return cmp.Or(cmp.Compare(a.Price, b.Price), cmp.Compare(a.Name(), b.Name()))
	})
	tried := 0
	without := -1.0
	for _, e := range order {
		if tried == destinationTries || d.outOfTime(d.opts.MultiNodeTimeout) {
			break
		}
		if e.Price >= dearest || d.snap.Now.Sub(consolidatableSince(e)) >= HoldEmptyFor {
			continue
		}
		tried++
		if without < 0 {
			without = d.endAfter(gone, takers, 0)
		}
		rest := slices.DeleteFunc(slices.Clone(gone), func(c *Candidate) bool { return c == e })
		if with := d.endAfter(rest, takers, 0); with < without-1e-9 {
			if d.held == nil {
				d.held = map[*Candidate]bool{}
			}
			d.held[e] = true
			d.explain(e, EventUnconsolidatable, Blocker{KindDestination, fmt.Sprintf(
				"empty, but kept as the destination of dearer nodes' pods: the cluster can end at %s with it, %s without; kept until %s at most",
				fmtPrice(with), fmtPrice(without), consolidatableSince(e).Add(HoldEmptyFor).UTC().Format("15:04:05 UTC"))})
			gone, without = rest, with
		}
	}
	return slices.DeleteFunc(empty, func(c *Candidate) bool { return d.held[c] })
}

// keepArrivals returns the empty nodes emptiness is about to delete less those the pods of nodes
// going away are headed for: where those pods fit now, on the nodes that stay, the empty ones
// tried last. Provisioning buys machines for such pods while their node drains (a
// terminationGracePeriod, a PDB that lets one pod go at a time, an interruption's notice); the
// machine is empty until they arrive, and deleting it then would leave them to wait for another
// launch. Kept, it gets an explanation and goes once they have arrived elsewhere or the drain is
// over, as any empty node.
func (d *decider) keepArrivals(empty []*Candidate) []*Candidate {
	s := d.sim
	if len(s.moving) == 0 || len(empty) == 0 {
		return empty
	}
	nodes := make([]solver.ExistingNode, 0, len(s.nodes))
	for _, last := range []bool{false, true} {
		for _, n := range s.nodes {
			if (s.empty[n.Name] != nil) == last {
				nodes = append(nodes, n)
			}
		}
	}
	headed := map[string]int{}
	for _, b := range s.solve(s.moving, nodes, nil).Bindings {
		headed[b.Node]++
	}
	return slices.DeleteFunc(empty, func(c *Candidate) bool {
		n := headed[c.Name()]
		if n == 0 {
			return false
		}
		if d.held == nil {
			d.held = map[*Candidate]bool{}
		}
		d.held[c] = true
		d.explain(c, EventUnconsolidatable, Blocker{KindDestination, fmt.Sprintf(
			"empty, but kept for %d pod(s) of nodes going away, which will move here", n)})
		return true
	})
}

// consolidatableSince is when the node last became consolidatable: its last pod event plus
// consolidateAfter, or, when no pod event is recorded, its Consolidatable condition's transition.
func consolidatableSince(c *Candidate) time.Time {
	if t := c.NodeClaim.Status.LastPodEventTime.Time; !t.IsZero() {
		if after := c.Pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration; after != nil {
			return t.Add(*after)
		}
	}
	if cond := meta.FindStatusCondition(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable); cond != nil {
		return cond.LastTransitionTime.Time
	}
	return c.NodeClaim.CreationTimestamp.Time
}

// willEmpty reports whether emptiness removes the node once its consolidateAfter has passed: it
// would take it (emptinessWillTake) and does not keep it as a destination.
func (d *decider) willEmpty(c *Candidate) bool {
	return c.emptinessWillTake() && !d.held[c]
}

// drift replaces drifted nodes: all empty ones the Drifted budgets allow at once, else the
// longest-drifted node whose pods fit on the other nodes plus any replacements.
func (d *decider) drift() *Command {
	var drifted []*Candidate
	for _, c := range d.all {
		if c.blocked.Message == "" && meta.IsStatusConditionTrue(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeDrifted) {
			drifted = append(drifted, c)
		}
	}
	d.out.Eligible[karpv1.DisruptionReasonDrifted] = len(drifted)
	slices.SortStableFunc(drifted, driftOrder)
	chosen := map[string]int{}
	empty := &Command{Method: MethodDrift, Reason: karpv1.DisruptionReasonDrifted}
	for _, c := range drifted {
		if c.Empty() && d.budget(c, karpv1.DisruptionReasonDrifted, chosen) {
			chosen[c.Pool.NodePool.Name]++
			empty.Candidates = append(empty.Candidates, c)
			empty.PriceBefore += c.Price
		}
	}
	if len(empty.Candidates) > 0 {
		return empty
	}
	for _, c := range drifted {
		if !d.budget(c, karpv1.DisruptionReasonDrifted, chosen) {
			continue
		}
		res := d.sim.run([]*Candidate{c})
		if res.failed != "" {
			if cmd := d.terminateFirst(c, MethodDrift, karpv1.DisruptionReasonDrifted, d.opts.TerminateFirstDrift); cmd != nil {
				return cmd
			}
			d.explain(c, EventDisruptionBlocked, Blocker{KindScheduling, "drifted, but " + res.failed})
			continue
		}
		return newCommand(MethodDrift, karpv1.DisruptionReasonDrifted, []*Candidate{c}, res)
	}
	return nil
}

// consolidationCandidates are the nodes consolidation may act on, easiest first: least used
// (their pods most likely fit elsewhere), then most money per unit of disruption. (Ordering by
// money alone put large, full machines first, whose pods fit nowhere else; the searches spent
// their simulations on them and stopped with the cluster at 1.85× its LP bound.)
func (d *decider) consolidationCandidates() []*Candidate {
	var out []*Candidate
	for _, c := range d.all {
		if c.Empty() || !d.consolidatable(c) {
			continue
		}
		out = append(out, c)
	}
	slices.SortStableFunc(out, consolidationOrder)
	return out
}

// consolidationOrder compares candidates in consolidation order: least used, then most money per
// unit of disruption, then by name.
func consolidationOrder(a, b *Candidate) int {
	return cmp.Or(cmp.Compare(a.Utilization, b.Utilization), cmp.Compare(b.Price/b.DisruptionCost, a.Price/a.DisruptionCost),
		cmp.Compare(a.Name(), b.Name()))
}

// driftOrder compares drifted candidates in the order drift replaces them: drifted longest first.
func driftOrder(a, b *Candidate) int {
	ta := meta.FindStatusCondition(a.NodeClaim.Status.Conditions, karpv1.ConditionTypeDrifted).LastTransitionTime.Time
	tb := meta.FindStatusCondition(b.NodeClaim.Status.Conditions, karpv1.ConditionTypeDrifted).LastTransitionTime.Time
	return cmp.Or(ta.Compare(tb), cmp.Compare(a.Name(), b.Name()))
}

// outOfTime reports whether the search has used its time.
func (d *decider) outOfTime(limit time.Duration) bool {
	return d.opts.Elapsed != nil && d.opts.Elapsed() > limit
}

// singleNode deletes or replaces the first candidate, in consolidation order, that a cheaper
// arrangement can do without — or, when taking it would keep a dearer candidate for good, that
// one (endState).
func (d *decider) singleNode() *Command {
	cands := d.consolidationCandidates()
	d.out.Eligible[karpv1.DisruptionReasonUnderutilized] = len(cands)
	tried := 0
	for i, c := range cands {
		if !d.budget(c, karpv1.DisruptionReasonUnderutilized, nil) {
			continue
		}
		if why, bounded := d.pricedBound(c); bounded {
			d.explain(c, EventUnconsolidatable, why)
			continue
		}
		if tried == d.opts.SingleNodeSolves || d.outOfTime(d.opts.MultiNodeTimeout) {
			break
		}
		tried++
		cmd, why := d.consolidate(MethodSingleNode, []*Candidate{c})
		if cmd != nil {
			return d.endState(cmd, cands, i)
		}
		d.explain(c, EventUnconsolidatable, why)
	}
	return nil
}

// endStateAlternatives bounds the later candidates endState weighs against the first workable
// step; endStateSteps bounds the simulations of what each leaves behind.
const (
	endStateAlternatives = 3
	endStateSteps        = 6
)

// endState weighs what the first workable step leaves behind. Consolidation order takes the
// easiest step (the least used node, whose pods fit elsewhere most surely); but when a later
// candidate saves more, the two steps may exclude each other — then whichever machine is kept
// stays for good, and the easy step strands the dearer one. So the first step and up to
// endStateAlternatives later ones that save more (each passed the same calm rules on its own:
// budgets, PDBs, do-not-disrupt, the churn guard, the score) are each followed by what later
// rounds could still remove without a launch (leftAfter), and the step whose end costs least is
// taken; on a tie, the first. cands are the candidates in consolidation order, cmd's at first.
func (d *decider) endState(cmd *Command, cands []*Candidate, first int) *Command {
	best, bestEnd := cmd, -1.0
	tried := 0
	for _, c := range cands[first+1:] {
		if tried == endStateAlternatives || d.outOfTime(d.opts.MultiNodeTimeout) {
			break
		}
		if c.Price <= cmd.Savings() || !d.budget(c, karpv1.DisruptionReasonUnderutilized, nil) {
			continue // it cannot save more than the step in hand, or may not go now
		}
		if _, bounded := d.pricedBound(c); bounded {
			continue
		}
		tried++
		alt, _ := d.consolidate(MethodSingleNode, []*Candidate{c})
		if alt == nil || alt.Savings() <= cmd.Savings() {
			continue
		}
		if bestEnd < 0 {
			bestEnd = d.leftAfter(cmd, cands)
		}
		if end := d.leftAfter(alt, cands); end < bestEnd-1e-9 {
			best, bestEnd = alt, end
		}
	}
	return best
}

// leftAfter is the price of the candidates' machines that remain once the command is done and
// later rounds have removed, in consolidation order, every other candidate whose pods then fit
// on the rest with no launch (endAfter). Replacements count at their price. cands are the
// candidates in consolidation order.
func (d *decider) leftAfter(cmd *Command, cands []*Candidate) float64 {
	return cmd.PriceAfter + d.endAfter(cmd.Candidates, cands, len(cmd.Replacements))
}

// endAfter is the price of the candidates' machines that remain once the gone ones are removed
// and later rounds have removed, in consolidation order, every other of cands whose pods then fit
// on the rest with no launch beyond the launches the gone ones need (at most endStateSteps
// simulations), nodes inside their consolidateAfter taking pods as they will once it passes.
func (d *decider) endAfter(gone, cands []*Candidate, launches int) float64 {
	// The end, not the next step: a node the scale-in touched a moment ago takes pods once its
	// consolidateAfter has passed.
	d.sim.eventually = true
	defer func() { d.sim.eventually = false }()
	gone = slices.Clone(gone)
	steps := 0
	for _, c := range cands {
		if slices.Contains(gone, c) {
			continue
		}
		if steps == endStateSteps {
			break
		}
		steps++
		if res := d.sim.run(append(gone[:len(gone):len(gone)], c)); res.failed == "" && len(res.replacements) == launches {
			gone = append(gone, c)
		}
	}
	left := 0.0
	for _, c := range d.all {
		if !slices.Contains(gone, c) {
			left += c.Price
		}
	}
	return left
}

// consolidate evaluates disrupting the set: it returns the command, or why there is none.
func (d *decider) consolidate(m Method, set []*Candidate) (*Command, Blocker) {
	res := d.sim.runOne(set)
	if res.failed != "" {
		return nil, Blocker{KindScheduling, res.failed}
	}
	cmd := newCommand(m, karpv1.DisruptionReasonUnderutilized, set, simResult{bindings: res.bindings})
	switch len(res.replacements) {
	case 0:
	case 1:
		r, why := d.cheaper(set, cmd.PriceBefore, res.replacements[0], m == MethodSingleNode)
		if r == nil {
			return nil, why
		}
		cmd.Replacements, cmd.PriceAfter = []*solver.PlannedNodeClaim{r}, r.Price
	default:
		return nil, Blocker{KindScheduling, fmt.Sprintf("its pods would need %d new machines, and consolidation launches at most one", len(res.replacements))}
	}
	if kept := d.keptEmpty(cmd); len(kept) > 0 {
		// Pods put on an empty node keep a machine emptiness would remove: its price counts
		// against the saving.
		for _, c := range kept {
			cmd.PriceAfter += c.Price
		}
		if cmd.Savings() <= 0 {
			return nil, Blocker{KindSaving, fmt.Sprintf("its pods would keep empty node %s, which costs %s: no saving", kept[0].Name(), fmtPrice(kept[0].Price))}
		}
	}
	if why := d.priced(cmd); why.Message != "" {
		return nil, why
	}
	return cmd, Blocker{}
}

// keptEmpty are the empty nodes emptiness would take that the command's pods go to.
func (d *decider) keptEmpty(cmd *Command) []*Candidate {
	var out []*Candidate
	for _, b := range cmd.Bindings {
		if c := d.sim.empty[b.Node]; c != nil && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// newCommand disrupts the set, launching the simulation's replacements first.
func newCommand(m Method, reason karpv1.DisruptionReason, set []*Candidate, res simResult) *Command {
	cmd := &Command{Method: m, Reason: reason, Candidates: set, Replacements: res.replacements, Bindings: res.bindings}
	for _, c := range set {
		cmd.PriceBefore += c.Price
	}
	for _, r := range res.replacements {
		cmd.PriceAfter += r.Price
	}
	return cmd
}

// fmtPrice formats an hourly price.
func fmtPrice(p float64) string { return fmt.Sprintf("$%.4f/h", p) }
