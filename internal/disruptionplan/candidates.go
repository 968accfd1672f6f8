package disruptionplan

import (
	"encoding/json"
	"time"

	"fmt"
	"math"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/provreq"
	"capstan.dev/capstan/internal/solver"
)

// ReplacementAnnotationKey marks a NodeClaim launched by a disruption command to replace others;
// its value is the method. A consolidation's replacement is not consolidated again within its
// pool's consolidateAfter of its creation.
const ReplacementAnnotationKey = "capstan.dev/disruption-replacement"

// Candidate is a node a voluntary method may disrupt, with what disrupting it costs.
type Candidate struct {
	*Node
	// Pool is the node's NodePool.
	Pool *Pool
	// Price is the machine's hourly price plus its pool's per-node cost; PriceKnown is false when
	// the catalog no longer offers its type, zone and capacity type (then it is not consolidated).
	Price      float64
	PriceKnown bool
	// CapacityType is the machine's capacity type (spot, on-demand, reserved).
	CapacityType string
	// Reschedulable are the pods that would move: not DaemonSet or mirror pods, not finished,
	// not already terminating.
	Reschedulable []*corev1.Pod
	// DisruptionCost is 1 plus the eviction cost of each reschedulable pod (EvictionCost).
	DisruptionCost float64
	// Utilization is the larger of the node's CPU and memory requested over allocatable.
	Utilization float64
	// blocked is why no voluntary method may disrupt the node (empty when none); noConsolidation
	// is why consolidation may not (besides blocked).
	blocked, noConsolidation Blocker
	// movedAgain names a pod of the node that a consolidation moved within Options.EvictionMemory
	// (the churn guard) when its pool scores its moves, "" otherwise: a move may take the node
	// only past ChurnK's bar.
	movedAgain string
}

// Name is the node's name.
func (c *Candidate) Name() string { return c.Node.Name() }

// Empty reports whether no pod would have to move.
func (c *Candidate) Empty() bool { return len(c.Reschedulable) == 0 }

// emptinessWillTake reports whether emptiness removes the node once its consolidateAfter has
// passed: empty, not blocked, and its pool's consolidateAfter is not Never.
func (c *Candidate) emptinessWillTake() bool {
	return c.Empty() && c.blocked.Message == "" && c.Pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration != nil
}

// EvictionCost is what evicting the pod costs in disruption scores: 1, plus the cost its user
// gave it over 2^27 (karpenter.sh/disruption-cost, else a controller.kubernetes.io/pod-deletion-cost
// that Capstan did not write: pods.UserEvictionCost), plus its priority over 2^25, never below
// zero. The deletion costs Capstan writes rank nodes for scale-ins; counting them here would make
// a node cheaper to disrupt because Capstan wants it gone.
func EvictionCost(p *corev1.Pod) float64 {
	cost := 1.0
	if c, ok := pods.UserEvictionCost(p); ok {
		cost += float64(c) / (1 << 27)
	}
	if p.Spec.Priority != nil {
		cost += float64(*p.Spec.Priority) / (1 << 25)
	}
	return math.Max(0, cost)
}

// moving are the node's reschedulable pods and the node's disruption cost: 1 plus their
// eviction costs.
func moving(n *Node) ([]*corev1.Pod, float64) {
	var out []*corev1.Pod
	cost := 1.0
	for _, p := range n.Pods {
		if pods.Reschedulable(p) {
			out = append(out, p)
			cost += EvictionCost(p)
		}
	}
	return out, cost
}

// pdbIndex finds the PodDisruptionBudgets covering a pod.
type pdbIndex struct {
	byNamespace map[string][]pdbSelector
}

type pdbSelector struct {
	pdb *policyv1.PodDisruptionBudget
	sel labels.Selector
}

func newPDBIndex(pdbs []*policyv1.PodDisruptionBudget) *pdbIndex {
	idx := &pdbIndex{byNamespace: map[string][]pdbSelector{}}
	for _, pdb := range pdbs {
		if pdb.Spec.Selector == nil {
			continue // selects nothing
		}
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			continue // the API server would refuse to evict through it too; nothing to honour
		}
		idx.byNamespace[pdb.Namespace] = append(idx.byNamespace[pdb.Namespace], pdbSelector{pdb: pdb, sel: sel})
	}
	return idx
}

// blocks says why the PDBs covering the pod forbid evicting it now, or "".
func (idx *pdbIndex) blocks(p *corev1.Pod) string {
	var covering []*policyv1.PodDisruptionBudget
	for _, s := range idx.byNamespace[p.Namespace] {
		if s.sel.Matches(labels.Set(p.Labels)) {
			covering = append(covering, s.pdb)
		}
	}
	if len(covering) > 1 {
		// The Eviction API refuses pods with more than one budget.
		return fmt.Sprintf("pod %s/%s is covered by %d PodDisruptionBudgets (%s/%s, %s/%s); the Eviction API refuses it",
			p.Namespace, p.Name, len(covering), covering[0].Namespace, covering[0].Name, covering[1].Namespace, covering[1].Name)
	}
	if len(covering) == 1 && covering[0].Status.DisruptionsAllowed <= 0 && !evictableUnhealthy(p, covering[0]) {
		return fmt.Sprintf("pdb %s/%s allows no disruption", covering[0].Namespace, covering[0].Name)
	}
	return ""
}

// evictableUnhealthy reports whether the Eviction API evicts the pod whatever its budget's
// disruptionsAllowed, as it does a pod that is not Ready when the budget's
// unhealthyPodEvictionPolicy is AlwaysAllow, or — under the default IfHealthyBudget — while the
// budget's healthy pods are as many as it wants (the pod, not Ready, is not one of them). A
// pending pod is evicted whatever the budget too.
func evictableUnhealthy(p *corev1.Pod, pdb *policyv1.PodDisruptionBudget) bool {
	if p.Status.Phase == corev1.PodPending {
		return true
	}
	if podReady(p) {
		return false
	}
	if pol := pdb.Spec.UnhealthyPodEvictionPolicy; pol != nil && *pol == policyv1.AlwaysAllow {
		return true
	}
	return pdb.Status.DesiredHealthy > 0 && pdb.Status.CurrentHealthy >= pdb.Status.DesiredHealthy
}

// podReady reports whether the pod's Ready condition is True.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Blocker is why a node is not disrupted: a kind (what sort of rule — the events' action, so
// that blockers of different kinds are different events) and a message naming it.
type Blocker struct {
	Kind, Message string
}

// Kinds of blockers.
const (
	KindDoNotDisrupt        = "DoNotDisrupt"
	KindPodDisruptionBudget = "PodDisruptionBudget"
	KindDisruptionBudget    = "DisruptionBudget"
	KindConsolidateAfter    = "ConsolidateAfter"
	KindPolicy              = "ConsolidationPolicy"
	KindNoController        = "NoController"
	KindChurnGuard          = "ChurnGuard"
	KindPrice               = "Price"
	KindSpot                = "SpotToSpot"
	KindBalanced            = "Balanced"
	KindSaving              = "Saving"
	KindScheduling          = "Scheduling"
	KindCapacityBuffer      = "CapacityBuffer"
	KindProvisioningRequest = "ProvisioningRequest"
	// KindDestination: an empty node kept as the destination of dearer nodes' pods.
	KindDestination = "Destination"
)

// Event reasons of explanations.
const (
	// EventDisruptionBlocked: a rule forbids disrupting the node now (do-not-disrupt, a PDB, a
	// budget).
	EventDisruptionBlocked = "DisruptionBlocked"
	// EventUnconsolidatable: consolidation found no cheaper arrangement without the node.
	EventUnconsolidatable = "Unconsolidatable"
	// EventNodeRepairBlocked: node repair is held back for the whole pool (too many unhealthy).
	EventNodeRepairBlocked = "NodeRepairBlocked"
)

// candidates builds the candidates of every managed, initialized node that is not being
// disrupted, with their blockers; disrupting counts, per pool, the nodes that already are.
func (d *decider) candidates() {
	d.pdbs = newPDBIndex(d.snap.PDBs)
	d.moved = newMovedPods(d.snap.Evictions, d.snap.Now, d.opts.EvictionMemory)
	for _, n := range d.snap.Nodes {
		pool := d.pools[n.NodeClaim.Labels[karpv1.NodePoolLabelKey]]
		if pool == nil || !counted(n) {
			continue
		}
		d.poolNodes[pool.NodePool.Name]++
		if disrupting(n) {
			d.disrupting[pool.NodePool.Name]++
			d.inProgress = append(d.inProgress, n)
			continue
		}
		c := newCandidate(n, pool)
		d.block(c)
		d.all = append(d.all, c)
	}
}

// newCandidate is the node as a candidate of its pool: its price, its pods to move and its use,
// without blockers (block records those).
func newCandidate(n *Node, pool *Pool) *Candidate {
	c := &Candidate{Node: n, Pool: pool}
	c.Price, c.CapacityType, c.PriceKnown = nodePrice(n, pool)
	c.Reschedulable, c.DisruptionCost = moving(n)
	c.Utilization = utilization(n)
	return c
}

// registered reports whether the node has registered and its instance is not yet gone.
func registered(n *Node) bool {
	return n.Node != nil && !meta.IsStatusConditionTrue(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInstanceTerminating)
}

// counted reports whether the node counts towards its pool's size for budgets: registered and
// initialized (a replacement still starting does not inflate a percentage).
func counted(n *Node) bool {
	return registered(n) && meta.IsStatusConditionTrue(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInitialized)
}

// disrupting reports whether the node is already being disrupted or is unhealthy: being deleted,
// tainted by a disruption command, or not Ready. Such nodes use up their pool's budgets.
func disrupting(n *Node) bool {
	if !n.NodeClaim.DeletionTimestamp.IsZero() || !n.Node.DeletionTimestamp.IsZero() {
		return true
	}
	if nodeclaims.Disrupted(n.Node) {
		return true
	}
	for _, c := range n.Node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status != corev1.ConditionTrue
		}
	}
	return true
}

// podBlocker is the first of the candidate's pods that blocks its disruption — do-not-disrupt, or
// a PodDisruptionBudget the Eviction API would refuse it through — and why.
func podBlocker(c *Candidate, pdbs *pdbIndex, now time.Time) (Blocker, bool) {
	for _, p := range c.Reschedulable {
		if pods.DoNotDisrupt(p, now) {
			return Blocker{KindDoNotDisrupt, fmt.Sprintf("pod %s/%s has %s", p.Namespace, p.Name, karpv1.DoNotDisruptAnnotationKey)}, true
		}
		if why := pdbs.blocks(p); why != "" {
			return Blocker{KindPodDisruptionBudget, why}, true
		}
	}
	return Blocker{}, false
}

// block records what keeps the candidate from voluntary disruption and from consolidation.
func (d *decider) block(c *Candidate) {
	pdbs, moved := d.pdbs, d.moved
	now := d.snap.Now
	if v := c.Node.Node.Annotations[karpv1.DoNotDisruptAnnotationKey]; v == "true" {
		c.blocked = Blocker{KindDoNotDisrupt, fmt.Sprintf("node %s has %s", c.Name(), karpv1.DoNotDisruptAnnotationKey)}
		return
	}
	if b, ok := podBlocker(c, pdbs, now); ok {
		c.blocked = b
		return
	}
	np := c.Pool.NodePool
	req, booked := provreq.Booked(c.NodeClaim, now)
	switch {
	case booked:
		c.noConsolidation = Blocker{KindProvisioningRequest, fmt.Sprintf("bought for ProvisioningRequest %s, kept for its pods until %s",
			req, c.NodeClaim.Annotations[provreq.BookedUntilAnnotationKey])}
	case np.Spec.Disruption.ConsolidateAfter.Duration == nil:
		c.noConsolidation = Blocker{KindConsolidateAfter, fmt.Sprintf("NodePool %s has consolidateAfter: Never", np.Name)}
	case !meta.IsStatusConditionTrue(c.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable):
		c.noConsolidation = Blocker{KindConsolidateAfter, fmt.Sprintf("not consolidatable yet: a pod arrived or left less than consolidateAfter (%s) ago", np.Spec.Disruption.ConsolidateAfter.String())}
	case c.NodeClaim.Annotations[ReplacementAnnotationKey] != "" &&
		now.Sub(c.NodeClaim.CreationTimestamp.Time) < *np.Spec.Disruption.ConsolidateAfter.Duration:
		c.noConsolidation = Blocker{KindChurnGuard, fmt.Sprintf("launched by a disruption at %s, within consolidateAfter (%s) of now",
			c.NodeClaim.CreationTimestamp.UTC().Format("15:04:05 UTC"), np.Spec.Disruption.ConsolidateAfter.String())}
	case d.awaited[c.NodeClaim.Name] != "":
		c.noConsolidation = Blocker{KindChurnGuard, fmt.Sprintf("launched by a disruption to take the pods of %s, which is still there", d.awaited[c.NodeClaim.Name])}
	case c.NodeClaim.Annotations[ReplacementAnnotationKey] != "" && d.opts.ReplacementSettle > 0:
		if until := replacementSettled(c.NodeClaim, d.opts.ReplacementSettle); now.Before(until) {
			c.noConsolidation = Blocker{KindChurnGuard, fmt.Sprintf("launched by a disruption, its pods may still be on their way (drained, then created again by their controllers); not before %s",
				until.UTC().Format("15:04:05 UTC"))}
		}
	}
	if c.noConsolidation.Message != "" || c.Empty() {
		return
	}
	if np.Spec.Disruption.ConsolidationPolicy == karpv1.ConsolidationPolicyWhenEmpty {
		c.noConsolidation = Blocker{KindPolicy, fmt.Sprintf("NodePool %s consolidates only empty nodes (WhenEmpty)", np.Name)}
		return
	}
	for _, p := range c.Reschedulable {
		if metav1.GetControllerOf(p) == nil {
			c.noConsolidation = Blocker{KindNoController, fmt.Sprintf("pod %s/%s has no controller that would recreate it", p.Namespace, p.Name)}
			return
		}
		if at, ok := moved.moved(p); ok {
			if d.k(c.Pool) > 0 {
				// Scored moves may take it again, when worth it many times over (ChurnK).
				if c.movedAgain == "" {
					c.movedAgain = fmt.Sprintf("pod %s/%s was moved by a consolidation at %s", p.Namespace, p.Name, at.UTC().Format("15:04:05 UTC"))
				}
				continue
			}
			c.noConsolidation = Blocker{KindChurnGuard, fmt.Sprintf("pod %s/%s was moved by a consolidation at %s; not again until %s",
				p.Namespace, p.Name, at.UTC().Format("15:04:05 UTC"), at.Add(d.opts.EvictionMemory).UTC().Format("15:04:05 UTC"))}
			return
		}
	}
	if !c.PriceKnown {
		c.noConsolidation = Blocker{KindPrice, fmt.Sprintf("the price of %s is unknown: its instance type, zone or capacity type is no longer offered", c.Name())}
	}
}

// CommandAnnotationKey records a disruption command on its candidates' NodeClaims (a JSON object:
// its id, method, reason, replacements' names, …), written before anything else the command
// does, so that a restart finds the command in flight.
const CommandAnnotationKey = "capstan.dev/disruption-command"

// awaitedReplacements maps each replacement named by a command still recorded on a claim that is
// there to that claim's name: until the candidate is gone its pods have not come over.
func awaitedReplacements(nodes []*Node) map[string]string {
	out := map[string]string{}
	for _, n := range nodes {
		v, ok := n.NodeClaim.Annotations[CommandAnnotationKey]
		if !ok {
			continue
		}
		var cmd struct {
			Replacements []string `json:"replacements"`
		}
		if json.Unmarshal([]byte(v), &cmd) != nil {
			continue
		}
		for _, r := range cmd.Replacements {
			out[r] = n.NodeClaim.Name
		}
	}
	return out
}

// replacementSettled is when a replacement stops waiting for the pods it was launched for: settle
// after its machine was initialised (after its creation while that is unknown).
func replacementSettled(nc *karpv1.NodeClaim, settle time.Duration) time.Time {
	from := nc.CreationTimestamp.Time
	if init := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeInitialized); init != nil && init.Status == metav1.ConditionTrue {
		from = init.LastTransitionTime.Time
	}
	return from.Add(settle)
}

// nodePrice is the price of the machine's offering plus the pool's per-node cost.
func nodePrice(n *Node, pool *Pool) (price float64, capacityType string, known bool) {
	lbl := func(k string) string {
		if n.Node != nil {
			if v, ok := n.Node.Labels[k]; ok {
				return v
			}
		}
		return n.NodeClaim.Labels[k]
	}
	ct := lbl(karpv1.CapacityTypeLabelKey)
	p, ok := nodeclaims.OfferingPrice(pool.Solver.InstanceTypes, lbl(karpv1.InstanceTypeLabelKey), lbl(karpv1.ZoneLabelKey), ct)
	if !ok {
		return 0, ct, false
	}
	return p + pool.Solver.NodeCost, ct, true
}

// NodePrice is the hourly price of a node's machine (its offering in its pool's instance types)
// plus its pool's per-node cost; false when the pool no longer offers it.
func NodePrice(n *Node, pool *Pool) (float64, bool) {
	p, _, ok := nodePrice(n, pool)
	return p, ok
}

// utilization is the larger of the node's CPU and memory requests over its allocatable.
func utilization(n *Node) float64 {
	used := solver.Requests(n.Pods)
	u := 0.0
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		a, q := n.Node.Status.Allocatable[r], used[r]
		if a.MilliValue() > 0 {
			u = math.Max(u, float64(q.MilliValue())/float64(a.MilliValue()))
		}
	}
	return u
}
