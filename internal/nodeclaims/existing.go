package nodeclaims

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// InFlightPrefix starts the solver's name of an in-flight NodeClaim (InFlight).
const InFlightPrefix = "nodeclaim/"

// HasTaint reports whether the node carries the taint (key and effect).
func HasTaint(n *corev1.Node, taint *corev1.Taint) bool {
	return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(taint) })
}

// Disrupted reports whether the node carries karpenter.sh/disrupted:NoSchedule.
func Disrupted(n *corev1.Node) bool { return HasTaint(n, &karpv1.DisruptedNoScheduleTaint) }

// PlannedTaint marks a node that consolidation expects to remove in a later round, when
// disruption budgets hold it back now: the kube-scheduler prefers the other nodes for the pods
// consolidation moves meanwhile, so they move once. Capstan's own solver ignores it: the node's
// room is real until it is disrupted, and no machine is bought to avoid it.
var PlannedTaint = corev1.Taint{Key: "capstan.dev/consolidation-planned", Effect: corev1.TaintEffectPreferNoSchedule}

// Planned reports whether the node carries PlannedTaint.
func Planned(n *corev1.Node) bool { return HasTaint(n, &PlannedTaint) }

// ephemeralTaintKeys are taints a starting node carries until its kubelet and network are up.
var ephemeralTaintKeys = []string{
	corev1.TaintNodeNotReady, corev1.TaintNodeUnreachable, corev1.TaintNodeNetworkUnavailable,
	"node.cloudprovider.kubernetes.io/uninitialized",
}

// SchedulingTaints are the node's taints as pods will see them once it is up, without
// PlannedTaint (a preference among nodes that all have room, not a reason to buy). The unregistered
// taint goes away at registration of a node whose NodeClaim lives; a node carrying it without one
// (a machine that registered again after its claim was deleted) keeps it and takes no pods. Until its NodeClaim (nc, nil when unknown) is initialized, a
// node is the in-flight capacity it is, so its startup taints and the ephemeral not-ready,
// unreachable and uninitialized taints do not count — its pods are not planned onto a second
// machine. On a Ready node the not-ready and unreachable taints are stale whatever its claim
// says: the node lifecycle controller removes them a moment after the node turns Ready, and a
// pass that saw them in that moment bought a machine for pods that had room.
func SchedulingTaints(n *corev1.Node, nc *karpv1.NodeClaim) []corev1.Taint {
	starting := nc != nil && !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized)
	claimed := nc != nil && nc.DeletionTimestamp.IsZero()
	ready := NodeReady(n)
	return slices.DeleteFunc(slices.Clone(n.Spec.Taints), func(t corev1.Taint) bool {
		if t.MatchTaint(&PlannedTaint) {
			return true
		}
		if t.Key == karpv1.UnregisteredTaintKey {
			return claimed
		}
		if ready && (t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable) {
			return true
		}
		if !starting {
			return false
		}
		if slices.Contains(ephemeralTaintKeys, t.Key) {
			return true
		}
		return slices.ContainsFunc(nc.Spec.StartupTaints, func(st corev1.Taint) bool { return st.MatchTaint(&t) })
	})
}

// InFlight describes a NodeClaim without a node as the node it will be, named InFlightPrefix and
// the claim's name: its labels and resolved requirements, its taints, its allocatable (known once
// launched, else the least among its candidates, ExpectedAllocatable), and the DaemonSets' pods.
// It is false when the claim's requirements cannot be read or no type holds it.
func InFlight(nc *karpv1.NodeClaim, types []*cloudprovider.InstanceType, daemons []*corev1.Pod) (solver.ExistingNode, bool) {
	reqs, err := nodepools.FromAPI(nc.Spec.Requirements)
	if err != nil {
		return solver.ExistingNode{}, false
	}
	labels := reqs.Labels()
	maps.Copy(labels, nc.Labels)
	labels[corev1.LabelHostname] = nc.Name
	alloc := ExpectedAllocatable(nc, types)
	if len(alloc) == 0 {
		return solver.ExistingNode{}, false
	}
	en := solver.ExistingNode{Name: InFlightPrefix + nc.Name, Labels: labels, Taints: nc.Spec.Taints, Allocatable: alloc}
	// Keys the launch still decides (a zone among several): the claim's pods may land in any of
	// the values, which required anti-affinity must avoid.
	reqs.Each(func(r requirements.Requirement) {
		if _, decided := labels[r.Key]; decided || !r.IsFinite() || len(r.Values()) < 2 {
			return
		}
		if en.Undecided == nil {
			en.Undecided = map[string][]string{}
		}
		en.Undecided[r.Key] = r.Values()
	})
	en.Pods = append(en.Pods, daemons...)
	return en, true
}
