package disruptionplan

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
)

// RepairPolicy is a node condition that, held for Toleration, makes node repair replace the node
// (Karpenter's repair policies).
type RepairPolicy struct {
	ConditionType   corev1.NodeConditionType
	ConditionStatus corev1.ConditionStatus
	Toleration      time.Duration
}

// DefaultRepairPolicies are Karpenter's kubelet policies: Ready False or Unknown for 30 minutes.
var DefaultRepairPolicies = []RepairPolicy{
	{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionFalse, Toleration: 30 * time.Minute},
	{ConditionType: corev1.NodeReady, ConditionStatus: corev1.ConditionUnknown, Toleration: 30 * time.Minute},
}

// NodeMonitoringAgentPolicies are the conditions the EKS node monitoring agent sets, repaired
// on AWS as Karpenter's AWS provider and EKS repair them: accelerated hardware (GPU, Neuron) not
// ready for 10 minutes; the container runtime, kernel, networking or storage not ready for 30.
var NodeMonitoringAgentPolicies = []RepairPolicy{
	{ConditionType: "AcceleratedHardwareReady", ConditionStatus: corev1.ConditionFalse, Toleration: 10 * time.Minute},
	{ConditionType: "ContainerRuntimeReady", ConditionStatus: corev1.ConditionFalse, Toleration: 30 * time.Minute},
	{ConditionType: "KernelReady", ConditionStatus: corev1.ConditionFalse, Toleration: 30 * time.Minute},
	{ConditionType: "NetworkingReady", ConditionStatus: corev1.ConditionFalse, Toleration: 30 * time.Minute},
	{ConditionType: "StorageReady", ConditionStatus: corev1.ConditionFalse, Toleration: 30 * time.Minute},
}

// SimulatedUnhealthyCondition is the node condition the simulated cloud's repair policy acts on:
// a fault injected by hand (kubectl patch) or by a test, which no simulated kubelet resets.
const SimulatedUnhealthyCondition corev1.NodeConditionType = "SimulatedUnhealthy"

// SimulatedFaultPolicies are the simulated cloud's own: a node with SimulatedUnhealthy=True for
// 30 seconds is repaired, so that repair can be tried on a laptop without waiting out the
// kubelet's 30 minutes.
var SimulatedFaultPolicies = []RepairPolicy{
	{ConditionType: SimulatedUnhealthyCondition, ConditionStatus: corev1.ConditionTrue, Toleration: 30 * time.Second},
}

// RepairUnhealthyShare is the share of a pool's nodes above which no node of it is repaired: so
// many unhealthy at once is a correlated failure (a zone, the network, a bad image) that
// replacing nodes would not cure and could make worse.
const RepairUnhealthyShare = 0.2

// CorrelatedFailure says, when more than RepairUnhealthyShare of the pool's total nodes are
// unhealthy (sick of them), that none of them is repaired and why; "" otherwise.
func CorrelatedFailure(pool string, sick, total int) string {
	if sick <= int(math.Ceil(RepairUnhealthyShare*float64(total))) {
		return ""
	}
	return fmt.Sprintf("%d of NodePool %s's %d nodes are unhealthy, more than %.0f%%: no node of it is repaired until fewer are",
		sick, pool, total, 100*RepairUnhealthyShare)
}

// Repair blockers.
const (
	KindUnhealthyShare = "UnhealthyShare"
	KindDoNotRepair    = "DoNotRepair"
	KindNotRegistered  = "NotRegistered"
)

// leftToRegistration explains, once it is past its toleration, why a machine that never
// registered is not repaired: its registration timeout deletes and replaces it (Karpenter leaves
// it so too), and repairing it as well would buy twice.
func (d *decider) leftToRegistration(n *Node, pool *Pool, p RepairPolicy, since time.Time) {
	if age := d.snap.Now.Sub(since); age >= p.Toleration {
		d.explain(newCandidate(n, pool), EventDisruptionBlocked, Blocker{KindNotRegistered, fmt.Sprintf(
			"%s=%s for %s, but Node isn't initialized nor registered: its NodeClaim's registration timeout decides",
			p.ConditionType, p.ConditionStatus, age.Round(time.Second))})
	}
}

// claimRegistered reports whether the node's NodeClaim has registered: its Registered condition,
// or the Node's karpenter.sh/registered label (which registration sets, and Karpenter reads).
func claimRegistered(n *Node) bool {
	return meta.IsStatusConditionTrue(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeRegistered) ||
		n.Node.Labels[karpv1.NodeRegisteredLabelKey] == "true"
}

// unhealthy is a node matching a repair policy, since when.
type unhealthy struct {
	n      *Node
	policy RepairPolicy
	since  time.Time
}

// MatchRepair returns, of the policies the node's conditions match, the one due first (its
// condition's transition plus its toleration), and since when; ok false when none matches.
func MatchRepair(n *corev1.Node, policies []RepairPolicy) (RepairPolicy, time.Time, bool) {
	var best RepairPolicy
	var since time.Time
	found := false
	for _, p := range policies {
		for _, c := range n.Status.Conditions {
			if c.Type != p.ConditionType || c.Status != p.ConditionStatus {
				continue
			}
			if !found || c.LastTransitionTime.Add(p.Toleration).Before(since.Add(best.Toleration)) {
				best, since, found = p, c.LastTransitionTime.Time, true
			}
		}
	}
	return best, since, found
}

// repair replaces the node unhealthy longest past its policy's toleration (NodeRepair): at once
// when it is empty, else with replacements for its pods launched first. A node is left alone —
// with an explanation — when it carries karpenter.sh/do-not-repair, when more than
// RepairUnhealthyShare of its pool's nodes are unhealthy, when the pool's Unhealthy budget allows
// nothing, when pods that block disruption (do-not-disrupt, a PodDisruptionBudget) run on it and
// its NodeClaim has no terminationGracePeriod to bound their wait, or when its pods fit nowhere.
// Nodes being deleted or disrupted already count against the budget; unhealthy ones do not (they
// are what the budget paces).
func (d *decider) repair() *Command {
	if !d.opts.NodeRepair {
		return nil
	}
	policies := d.opts.RepairPolicies
	if policies == nil {
		policies = DefaultRepairPolicies
	}
	now := d.snap.Now
	// total and leaving count the initialized nodes, which the budgets pace; all and sick count
	// the registered ones too, for the correlated-failure share: a node that registered and never
	// initialized runs no workload, and is repaired without using up a budget (as Karpenter).
	total, all, sick, leaving := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	var due []unhealthy
	for _, n := range d.snap.Nodes {
		pool := d.pools[n.NodeClaim.Labels[karpv1.NodePoolLabelKey]]
		if pool == nil || !registered(n) {
			continue
		}
		name := pool.NodePool.Name
		all[name]++
		if counted(n) {
			total[name]++
		}
		if !n.NodeClaim.DeletionTimestamp.IsZero() || !n.Node.DeletionTimestamp.IsZero() || nodeclaims.Disrupted(n.Node) {
			if counted(n) {
				leaving[name]++
			}
			continue
		}
		p, since, ok := MatchRepair(n.Node, policies)
		if !ok {
			continue
		}
		if !claimRegistered(n) {
			d.leftToRegistration(n, pool, p, since)
			continue
		}
		sick[name]++
		if now.Sub(since) >= p.Toleration {
			due = append(due, unhealthy{n, p, since})
		}
	}
	slices.SortStableFunc(due, func(a, b unhealthy) int {
		return cmp.Or(a.since.Compare(b.since), cmp.Compare(a.n.Name(), b.n.Name()))
	})
	d.out.Eligible[karpv1.DisruptionReasonUnhealthy] = len(due)
	for _, u := range due {
		pool := d.pools[u.n.NodeClaim.Labels[karpv1.NodePoolLabelKey]]
		np := pool.NodePool
		c := newCandidate(u.n, pool)
		what := fmt.Sprintf("%s=%s for %s (repaired after %s)", u.policy.ConditionType, u.policy.ConditionStatus,
			now.Sub(u.since).Round(time.Second), u.policy.Toleration)
		if u.n.Node.Annotations[karpv1.DoNotRepairAnnotationKey] == "true" {
			d.explain(c, EventDisruptionBlocked, Blocker{KindDoNotRepair, fmt.Sprintf("%s, but the node has %s", what, karpv1.DoNotRepairAnnotationKey)})
			continue
		}
		if why := CorrelatedFailure(np.Name, sick[np.Name], all[np.Name]); why != "" {
			d.explain(c, EventNodeRepairBlocked, Blocker{KindUnhealthyShare, what + ", but " + why})
			continue
		}
		if counted(u.n) {
			a := allowance(np, karpv1.DisruptionReasonUnhealthy, now, total[np.Name], leaving[np.Name])
			d.out.Allowances[np.Name][karpv1.DisruptionReasonUnhealthy] = a
			if a.Allowed < 1 {
				d.explain(c, EventDisruptionBlocked, Blocker{KindDisruptionBudget, fmt.Sprintf("%s, but NodePool %s's Unhealthy budget allows no disruption now", what, np.Name)})
				continue
			}
		}
		// Only pods block repair (a node's karpenter.sh/do-not-disrupt does not: do-not-repair is
		// the node's veto), and only without a grace period to bound their wait (as Karpenter).
		if b, blocked := podBlocker(c, d.pdbs, now); blocked && c.NodeClaim.Spec.TerminationGracePeriod == nil {
			d.explain(c, EventDisruptionBlocked, Blocker{b.Kind, fmt.Sprintf(
				"%s, but %s, and its NodeClaim has no terminationGracePeriod to bound the wait", what, b.Message)})
			continue
		}
		cond := fmt.Sprintf("%s=%s since %s", u.policy.ConditionType, u.policy.ConditionStatus, u.since.UTC().Format("15:04:05 UTC"))
		if c.Empty() {
			return &Command{Method: MethodRepair, Reason: karpv1.DisruptionReasonUnhealthy, Candidates: []*Candidate{c}, PriceBefore: c.Price, Unhealthy: cond}
		}
		res := d.sim.run([]*Candidate{c})
		if res.failed != "" {
			if cmd := d.terminateFirst(c, MethodRepair, karpv1.DisruptionReasonUnhealthy, d.opts.TerminateFirstRepair); cmd != nil {
				cmd.Unhealthy = cond
				return cmd
			}
			d.explain(c, EventDisruptionBlocked, Blocker{KindScheduling, what + ", but " + res.failed})
			continue
		}
		cmd := newCommand(MethodRepair, karpv1.DisruptionReasonUnhealthy, []*Candidate{c}, res)
		cmd.Unhealthy = cond
		return cmd
	}
	return nil
}
