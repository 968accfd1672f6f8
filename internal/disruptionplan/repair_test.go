package disruptionplan_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
)

// unready makes the node's Ready condition status since the duration before t0.
func unready(n *disruptionplan.Node, status corev1.ConditionStatus, since time.Duration) {
	n.Node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status,
		LastTransitionTime: metav1.NewTime(t0.Add(-since))}}
}

// repairFleet is a pool of ten m nodes, each with one pod of 1 CPU, room for them elsewhere.
func repairFleet(t *testing.T, edit func(*karpv1.NodePool)) (*cluster, []*disruptionplan.Node) {
	c := newCluster(t)
	c.pool("p", func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration() // only repair acts
		if edit != nil {
			edit(np)
		}
	})
	var nodes []*disruptionplan.Node
	for i := range 10 {
		nodes = append(nodes, c.node("p", string(rune('a'+i)), "m", karpv1.CapacityTypeOnDemand, pods(string(rune('a'+i)), 1, "1")...))
	}
	return c, nodes
}

// A node Ready=Unknown for 30 minutes is replaced (its pod moved to the others); at 29 minutes
// it is not yet; with the gate off never.
func TestAnUnreadyNodeIsRepairedAfterItsToleration(t *testing.T) {
	c, nodes := repairFleet(t, nil)
	unready(nodes[3], corev1.ConditionUnknown, 29*time.Minute)
	if d := c.decide(disruptionplan.Options{NodeRepair: true}); d.Command != nil {
		t.Fatalf("within the toleration: %v", names(d.Command))
	}
	unready(nodes[3], corev1.ConditionUnknown, 30*time.Minute)
	if d := c.decide(disruptionplan.Options{}); d.Command != nil {
		t.Fatalf("gate off: %v", names(d.Command))
	}
	d := c.decide(disruptionplan.Options{NodeRepair: true})
	if d.Command == nil || d.Command.Method != disruptionplan.MethodRepair || d.Command.Reason != karpv1.DisruptionReasonUnhealthy ||
		!slices.Equal(names(d.Command), []string{"d"}) {
		t.Fatalf("command %+v, want node d repaired", d.Command)
	}
	if r := d.Command.Rule(); !strings.Contains(r, "Ready=Unknown") {
		t.Errorf("rule %q", r)
	}
	// The command still holds after its validation period.
	if cmd, why := disruptionplan.Validate(c.snap, disruptionplan.Options{NodeRepair: true}, d.Command); cmd == nil {
		t.Errorf("validation: %s", why)
	}
	// Healthy again: the command is dropped.
	unready(nodes[3], corev1.ConditionTrue, time.Minute)
	if cmd, why := disruptionplan.Validate(c.snap, disruptionplan.Options{NodeRepair: true}, d.Command); cmd != nil || !strings.Contains(why, "no longer needs repair") {
		t.Errorf("validation of a healthy node: %v, %q", cmd, why)
	}
}

// With 3 of 10 nodes unhealthy (more than 20%) none is repaired, and each says why; with 2 the
// longest unhealthy is.
func TestCorrelatedFailuresAreNotRepaired(t *testing.T) {
	c, nodes := repairFleet(t, nil)
	for i, n := range nodes[:3] {
		unready(n, corev1.ConditionFalse, time.Hour+time.Duration(i)*time.Minute)
	}
	d := c.decide(disruptionplan.Options{NodeRepair: true})
	if d.Command != nil {
		t.Fatalf("3 of 10 unhealthy: %v repaired", names(d.Command))
	}
	ev, msg := explanation(d, "a")
	if ev != disruptionplan.EventNodeRepairBlocked || !strings.Contains(msg, "3 of NodePool p's 10 nodes are unhealthy, more than 20%") {
		t.Fatalf("explanation %s %q", ev, msg)
	}
	unready(nodes[0], corev1.ConditionTrue, time.Minute)
	d = c.decide(disruptionplan.Options{NodeRepair: true})
	if !slices.Equal(names(d.Command), []string{"c"}) {
		t.Fatalf("2 of 10 unhealthy: %v, want c (unhealthy longest)", names(d.Command))
	}
}

// do-not-repair keeps the node; a PDB that blocks its pod keeps it unless its NodeClaim has a
// terminationGracePeriod to bound the wait; a budget of 0 for Unhealthy holds it.
func TestRepairRespectsItsBlockers(t *testing.T) {
	c, nodes := repairFleet(t, nil)
	unready(nodes[0], corev1.ConditionFalse, time.Hour)
	nodes[0].Node.Annotations = map[string]string{karpv1.DoNotRepairAnnotationKey: "true"}
	d := c.decide(disruptionplan.Options{NodeRepair: true})
	if _, msg := explanation(d, "a"); d.Command != nil || !strings.Contains(msg, "do-not-repair") {
		t.Fatalf("do-not-repair: %v, %q", names(d.Command), msg)
	}
	nodes[0].Node.Annotations = nil
	c.pdb("a", 0)
	d = c.decide(disruptionplan.Options{NodeRepair: true})
	if _, msg := explanation(d, "a"); d.Command != nil || !strings.Contains(msg, "no terminationGracePeriod") {
		t.Fatalf("PDB without a grace period: %v, %q", names(d.Command), msg)
	}
	nodes[0].NodeClaim.Spec.TerminationGracePeriod = &metav1.Duration{Duration: time.Hour}
	if d := c.decide(disruptionplan.Options{NodeRepair: true}); !slices.Equal(names(d.Command), []string{"a"}) {
		t.Fatalf("PDB with a grace period: %v, want a", names(d.Command))
	}
	c.snap.NodePools[0].NodePool.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnhealthy}}}
	d = c.decide(disruptionplan.Options{NodeRepair: true})
	if _, msg := explanation(d, "a"); d.Command != nil || !strings.Contains(msg, "Unhealthy budget") {
		t.Fatalf("budget 0: %v, %q", names(d.Command), msg)
	}
}

// On AWS a node whose kernel the node monitoring agent reports broken for 30 minutes is repaired;
// the kubelet's policies alone leave it, and a GPU fault is repaired after 10 minutes.
func TestNodeMonitoringAgentConditionsAreRepairedWithTheirPolicies(t *testing.T) {
	aws := append(slices.Clone(disruptionplan.DefaultRepairPolicies), disruptionplan.NodeMonitoringAgentPolicies...)
	c, nodes := repairFleet(t, nil)
	cond := func(n *disruptionplan.Node, typ corev1.NodeConditionType, since time.Duration) {
		n.Node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: typ, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(t0.Add(-since))}}
	}
	cond(nodes[2], "KernelReady", 29*time.Minute)
	if d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: aws}); d.Command != nil {
		t.Fatalf("within the toleration: %v", names(d.Command))
	}
	cond(nodes[2], "KernelReady", 30*time.Minute)
	if d := c.decide(disruptionplan.Options{NodeRepair: true}); d.Command != nil {
		t.Fatalf("the kubelet's policies alone repaired %v", names(d.Command))
	}
	d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: aws})
	if d.Command == nil || !slices.Equal(names(d.Command), []string{"c"}) || !strings.Contains(d.Command.Rule(), "KernelReady=False") {
		t.Fatalf("command %+v, want node c repaired for KernelReady=False", d.Command)
	}
	// Two conditions match: the one due first decides (the kernel's, though Ready went Unknown
	// later and is not yet due).
	nodes[2].Node.Status.Conditions[0] = corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, LastTransitionTime: metav1.NewTime(t0.Add(-5 * time.Minute))}
	if d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: aws}); d.Command == nil || !strings.Contains(d.Command.Rule(), "KernelReady=False") {
		t.Fatalf("Ready=Unknown for 5 minutes and KernelReady=False for 30: %+v", d.Command)
	}
	cond(nodes[2], "AcceleratedHardwareReady", 10*time.Minute)
	if d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: aws}); d.Command == nil || !strings.Contains(d.Command.Rule(), "AcceleratedHardwareReady=False") {
		t.Fatalf("a GPU fault for 10 minutes: %+v", d.Command)
	}
}

// An unhealthy node in a full capacity reservation whose pod fits nowhere else (a reserved-only
// pool of one node) is deleted first with TerminateFirstRepair, and held back without it.
func TestTerminateFirstRepairFreesTheReservationsMachine(t *testing.T) {
	c := newCluster(t)
	for i, it := range c.its {
		if it.Name == "m" {
			c.its[i] = cloudprovider.WithOfferings(it, cloudprovider.Offering{Zone: "z1", CapacityType: karpv1.CapacityTypeReserved,
				Price: cloudprovider.ReservedPrice(0.10), Available: false, ReservationID: "cr-7"})
		}
	}
	c.pool("p", func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
			Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeReserved}}}
	})
	n := c.node("p", "sick", "m", karpv1.CapacityTypeReserved, pods("sick", 1, "3")...)
	n.NodeClaim.Labels[cloudprovider.ReservationIDLabelKey] = "cr-7"
	unready(n, corev1.ConditionFalse, time.Hour)
	if d := c.decide(disruptionplan.Options{NodeRepair: true}); d.Command != nil {
		t.Fatalf("gate off: %v", names(d.Command))
	}
	d := c.decide(disruptionplan.Options{NodeRepair: true, TerminateFirstRepair: true})
	if d.Command == nil || d.Command.Method != disruptionplan.MethodRepair || len(d.Command.Replacements) != 0 || d.Command.TerminateFirst == "" {
		t.Fatalf("gate on: command %+v, want the node deleted first", d.Command)
	}
	if cmd, why := disruptionplan.Validate(c.snap, disruptionplan.Options{NodeRepair: true, TerminateFirstRepair: true}, d.Command); cmd == nil || cmd.TerminateFirst == "" {
		t.Fatalf("validation: %v (%s)", cmd, why)
	}
}

// A node's own karpenter.sh/do-not-disrupt does not hold its repair, without a grace period too:
// only pods that block eviction need one to bound their wait, and do-not-repair is the node's
// veto (as Karpenter v1.15).
func TestANodesDoNotDisruptDoesNotHoldRepair(t *testing.T) {
	c, nodes := repairFleet(t, nil)
	unready(nodes[0], corev1.ConditionFalse, time.Hour)
	nodes[0].Node.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	d := c.decide(disruptionplan.Options{NodeRepair: true})
	if !slices.Equal(names(d.Command), []string{"a"}) {
		_, msg := explanation(d, "a")
		t.Fatalf("command %v (%q), want a repaired", names(d.Command), msg)
	}
}

// A node that registered and never initialized, then stays not Ready past its toleration, is
// repaired — without using up the Unhealthy budget, which paces the initialized nodes (as
// Karpenter v1.15). Before, only initialized nodes were looked at: it stayed for good.
func TestANodeThatNeverInitializedIsRepaired(t *testing.T) {
	c, nodes := repairFleet(t, func(np *karpv1.NodePool) {
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonUnhealthy}}}
	})
	n := nodes[4]
	n.Pods = nil
	n.NodeClaim.Status.Conditions = slices.DeleteFunc(n.NodeClaim.Status.Conditions, func(c metav1.Condition) bool {
		return c.Type == karpv1.ConditionTypeInitialized
	})
	unready(n, corev1.ConditionFalse, 30*time.Minute)
	d := c.decide(disruptionplan.Options{NodeRepair: true})
	if !slices.Equal(names(d.Command), []string{"e"}) || d.Command.Method != disruptionplan.MethodRepair {
		_, msg := explanation(d, "e")
		t.Fatalf("command %v (%q), want e repaired", names(d.Command), msg)
	}
}

// On the simulated cloud an injected SimulatedUnhealthy=True is repaired after 30 seconds; the
// kubelet's policies alone never act on it.
func TestSimulatedFaultIsRepairedAfterThirtySeconds(t *testing.T) {
	sim := append(slices.Clone(disruptionplan.DefaultRepairPolicies), disruptionplan.SimulatedFaultPolicies...)
	c, nodes := repairFleet(t, nil)
	fault := func(since time.Duration) {
		nodes[1].Node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue},
			{Type: disruptionplan.SimulatedUnhealthyCondition, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0.Add(-since))}}
	}
	fault(29 * time.Second)
	if d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: sim}); d.Command != nil {
		t.Fatalf("within the toleration: %v", names(d.Command))
	}
	fault(30 * time.Second)
	if d := c.decide(disruptionplan.Options{NodeRepair: true}); d.Command != nil {
		t.Fatalf("the kubelet's policies alone repaired %v", names(d.Command))
	}
	d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: sim})
	if d.Command == nil || !slices.Equal(names(d.Command), []string{"b"}) || !strings.Contains(d.Command.Rule(), "SimulatedUnhealthy=True") {
		t.Fatalf("command %+v, want node b repaired for SimulatedUnhealthy=True", d.Command)
	}
}

// Karpenter v1.15's "should not repair a node that never registered": a NodeClaim Launched and
// not Registered, its Node without the karpenter.sh/registered label, unhealthy (BadNode) for 31
// minutes. The registration timeout owns it: no repair, and the event says why.
func TestANodeThatNeverRegisteredIsLeftToTheRegistrationTimeout(t *testing.T) {
	c, nodes := repairFleet(t, nil)
	n := nodes[2]
	n.Pods = nil
	n.NodeClaim.Status.Conditions = slices.DeleteFunc(n.NodeClaim.Status.Conditions, func(c metav1.Condition) bool {
		return c.Type != karpv1.ConditionTypeLaunched
	})
	delete(n.Node.Labels, karpv1.NodeRegisteredLabelKey)
	policies := []disruptionplan.RepairPolicy{{ConditionType: "BadNode", ConditionStatus: corev1.ConditionFalse, Toleration: 30 * time.Minute}}
	n.Node.Status.Conditions = append(n.Node.Status.Conditions, corev1.NodeCondition{Type: "BadNode", Status: corev1.ConditionFalse,
		LastTransitionTime: metav1.NewTime(t0.Add(-31 * time.Minute))})
	d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: policies})
	ev, msg := explanation(d, "c")
	if d.Command != nil || ev != disruptionplan.EventDisruptionBlocked || !strings.Contains(msg, "Node isn't initialized nor registered") {
		t.Fatalf("command %v, event %s %q; want no repair and the registration timeout named", names(d.Command), ev, msg)
	}
	// Registered (the label, as registration sets it), the same node is repaired.
	n.Node.Labels[karpv1.NodeRegisteredLabelKey] = "true"
	if d := c.decide(disruptionplan.Options{NodeRepair: true, RepairPolicies: policies}); !slices.Equal(names(d.Command), []string{"c"}) {
		t.Fatalf("registered: command %v, want c repaired", names(d.Command))
	}
}
