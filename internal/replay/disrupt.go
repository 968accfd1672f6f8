package replay

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/pods"
)

// disrupt runs a disruption round as the controller does: finish the command in flight once its
// replacements are ready; else carry out a decision whose validation period passed; else decide.
func (c *Cluster) disrupt() {
	if e := c.executing; e != nil {
		for _, r := range e.replacements {
			if r.node.Node == nil {
				return
			}
		}
		c.finish(e)
		c.executing = nil
		return
	}
	snap := c.Snapshot()
	if c.decided != nil {
		if c.now.Sub(c.decidedAt) < c.cfg.ValidationPeriod {
			return
		}
		cmd, _ := disruptionplan.Validate(snap, c.cfg.Disruption, c.decided)
		c.decided = nil
		if cmd != nil {
			c.execute(cmd)
		}
		return
	}
	dec := disruptionplan.Decide(snap, c.cfg.Disruption)
	if !dec.KeepPlanned {
		planned := map[string]bool{}
		for _, n := range dec.Planned {
			planned[n.NodeClaim.Name] = true
		}
		for _, m := range c.machines {
			m.planned = planned[m.node.NodeClaim.Name]
		}
	}
	if dec.Command != nil {
		c.decided, c.decidedAt = dec.Command, c.now
	}
}

// Snapshot is the cluster as the decision core sees it now.
func (c *Cluster) Snapshot() *disruptionplan.Snapshot {
	snap := &disruptionplan.Snapshot{Now: c.now, NodePools: c.pools, Pending: slices.Clone(c.pending),
		Evictions: c.evictions, ScaleDowns: c.scaleDowns, OtherNodes: c.fixed.OtherNodes, PDBs: c.fixed.PDBs,
		DaemonSetPods: c.fixed.DaemonSetPods, NamespaceLabels: c.fixed.NamespaceLabels, WellKnownLabels: c.fixed.WellKnownLabels}
	for _, m := range c.machines {
		nc := m.node.NodeClaim
		var after *time.Duration
		if pool := c.poolOf(nc.Labels[karpv1.NodePoolLabelKey]); pool != nil {
			after = pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration
		}
		meta.RemoveStatusCondition(&nc.Status.Conditions, karpv1.ConditionTypeConsolidatable)
		if m.node.Node != nil {
			// As the podevents controller stamps it: the decision core keeps moved pods off a
			// machine still inside its consolidateAfter.
			nc.Status.LastPodEventTime = metav1.NewTime(m.lastPodEvent)
			if after != nil && !c.now.Before(m.lastPodEvent.Add(*after)) {
				// True since consolidateAfter passed, as the condition's transition says.
				nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeConsolidatable,
					Status: metav1.ConditionTrue, Reason: "Consolidatable", LastTransitionTime: metav1.NewTime(m.lastPodEvent.Add(*after))})
			}
		}
		n := &disruptionplan.Node{NodeClaim: nc, Node: m.node.Node, Pods: m.node.Pods}
		if m.node.Node == nil {
			n.Pods = m.nominated
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	return snap
}

func (c *Cluster) machine(name string) *machine {
	for _, m := range c.machines {
		if m.node.NodeClaim.Name == name {
			return m
		}
	}
	return nil
}

// execute taints the candidates and launches the replacements; without replacements the
// candidates go at once.
func (c *Cluster) execute(cmd *disruptionplan.Command) {
	e := &execution{cmd: cmd}
	for _, cand := range cmd.Candidates {
		m := c.machine(cand.NodeClaim.Name)
		m.leaving = true
		m.node.Node.Spec.Taints = append(m.node.Node.Spec.Taints, karpv1.DisruptedNoScheduleTaint)
	}
	for _, r := range cmd.Replacements {
		e.replacements = append(e.replacements, c.launch(r, cmd.Method))
	}
	if len(e.replacements) == 0 {
		c.finish(e)
		return
	}
	c.executing = e
}

// finish deletes the candidates: their pods are evicted and their controllers recreate them,
// pending.
func (c *Cluster) finish(e *execution) {
	c.report.Commands[e.cmd.Method]++
	if c.cfg.Log != nil {
		c.cfg.Log(fmt.Sprintf("%s %s: %d node(s) $%.3f/h -> %d replacement(s) $%.3f/h, %d pods; cluster %d nodes $%.3f/h, %d pending",
			c.now.Format("15:04"), e.cmd.Method, len(e.cmd.Candidates), e.cmd.PriceBefore, len(e.cmd.Replacements), e.cmd.PriceAfter,
			len(e.cmd.Pods()), len(c.machines), c.Price(), len(c.pending)))
	}
	for _, cand := range e.cmd.Candidates {
		m := c.machine(cand.NodeClaim.Name)
		for _, p := range m.node.Pods {
			if !pods.Reschedulable(p) {
				// DaemonSet and mirror pods go with the node.
				continue
			}
			c.report.Evictions++
			if c.moved[p] {
				c.report.Reevictions++
				delete(c.moved, p)
			}
			owner := metav1.GetControllerOf(p)
			if e.cmd.Reason == karpv1.DisruptionReasonUnderutilized && owner != nil {
				c.evictions = append(c.evictions, disruptionplan.Eviction{Namespace: p.Namespace, Name: p.Name, Owner: owner.UID, At: c.now})
			}
			if fresh := c.recreate(p); fresh != nil {
				c.moved[fresh] = true
			}
		}
		c.machines = slices.DeleteFunc(c.machines, func(x *machine) bool { return x == m })
	}
	// Forget evictions the churn guard no longer needs.
	memory := c.cfg.Disruption.ChurnMemory()
	c.evictions = slices.DeleteFunc(c.evictions, func(ev disruptionplan.Eviction) bool { return c.now.Sub(ev.At) >= memory })
	// The evicted pods' replacements are scheduled at once, as the kube-scheduler would.
	c.schedule()
	c.bringUp()
}

// recreated is the pod its controller makes for an evicted one: the same spec, unbound, pending,
// under a new name (a StatefulSet's keeps its name).
func recreated(p *corev1.Pod, seq int, now time.Time) *corev1.Pod {
	q := p.DeepCopy()
	if metav1.GetControllerOf(p).Kind != "StatefulSet" {
		q.Name = fmt.Sprintf("%s-r%d", p.Name, seq)
	}
	q.UID = types.UID(fmt.Sprintf("%s-%d", p.UID, seq))
	q.CreationTimestamp = metav1.NewTime(now)
	q.Spec.NodeName = ""
	q.Status = corev1.PodStatus{Phase: corev1.PodPending}
	delete(q.Annotations, corev1.PodDeletionCost)
	return q
}

// recreate is what the pod's controller does when the pod is gone from its node: a new pod,
// pending (nil, counted lost, for a pod no controller owns).
func (c *Cluster) recreate(p *corev1.Pod) *corev1.Pod {
	c.seq++
	var fresh *corev1.Pod
	switch dep, ok := c.deps[p.Labels["app"]]; {
	case ok && slices.Contains(c.byDep[dep.Name], p):
		fresh = newPod(fmt.Sprintf("%s-%d", dep.Name, c.seq), dep, c.now)
		owned := c.byDep[dep.Name]
		owned[slices.Index(owned, p)] = fresh
	case metav1.GetControllerOf(p) != nil:
		fresh = recreated(p, c.seq, c.now)
	default:
		c.report.Lost++
		return nil
	}
	c.pending = append(c.pending, fresh)
	return fresh
}

// InterruptSpot reclaims a fraction of the running spot machines (rounded up; the first by name),
// as a spot interruption storm does: their pods come back pending, and are counted in
// Report.Interrupted, not as disruption's evictions. It returns the machines reclaimed.
func (c *Cluster) InterruptSpot(fraction float64) int {
	var spot []*machine
	for _, m := range c.machines {
		if m.node.Node != nil && m.node.NodeClaim.Labels[karpv1.CapacityTypeLabelKey] == karpv1.CapacityTypeSpot && !m.leaving {
			spot = append(spot, m)
		}
	}
	slices.SortFunc(spot, func(a, b *machine) int { return cmp.Compare(a.node.Name(), b.node.Name()) })
	n := min(len(spot), int(math.Ceil(fraction*float64(len(spot)))))
	for _, m := range spot[:n] {
		for _, p := range m.node.Pods {
			if pods.Reschedulable(p) {
				c.report.Interrupted++
				c.recreate(p)
			}
		}
		c.machines = slices.DeleteFunc(c.machines, func(x *machine) bool { return x == m })
	}
	if n > 0 {
		c.schedule()
		c.bringUp()
	}
	return n
}
