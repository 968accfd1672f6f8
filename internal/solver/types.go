package solver

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// Input is everything a solve reads.
type Input struct {
	// Pods are the pods to place. When limits cannot hold them all, the earlier ones are placed
	// first (the provisioner gives them oldest first).
	Pods []*corev1.Pod
	// NodePools are the pools new machines may come from.
	NodePools []NodePool
	// Nodes are existing nodes and in-flight NodeClaims, with the pods bound or nominated to them.
	Nodes []ExistingNode
	// DaemonSetPods are one pod per DaemonSet (its template); their requests are added to every
	// new machine they would run on.
	DaemonSetPods []*corev1.Pod
	// NamespaceLabels are the labels of namespaces, for pod-affinity namespace selectors.
	NamespaceLabels map[string]map[string]string
	// WellKnownLabels are the label keys the cloud provider resolves on its machines beyond
	// Kubernetes' and Karpenter's (cloudprovider.CloudProvider.WellKnownLabels): a pod or pool may
	// require them without a pool setting them, and an instance type without one does not carry
	// that label. Nil means the keys some instance type of the input defines.
	WellKnownLabels []string
	// Attachments are the CSI volumes each pod (pending or bound, by UID) attaches, per driver. An
	// existing node holds at most its VolumeLimits of a driver; a new machine's limit is not
	// known before it registers, so it is not limited.
	Attachments map[types.UID]map[string]int64
	// Moved are the pods (by UID) that a consolidation moves off the nodes it removes: a node
	// with RefusesMoved takes none of them.
	Moved map[types.UID]bool
	// SpendingLeft is what is left of the cluster's spending limit, in dollars per hour, across
	// every pool: the new claims of all pools together may cost at most that much (each at its
	// worst case, spend.WorstCase). Nil means no cluster-wide limit.
	SpendingLeft *float64
}

// NodePool is a pool as the solver sees it.
type NodePool struct {
	// Name is the NodePool's name.
	Name string
	// Weight orders pools; higher first.
	Weight int32
	// RegistrationUnhealthy pools (NodeRegistrationHealthy=False: their recent launches did not
	// register nodes) are tried after every other pool, whatever their weight.
	RegistrationUnhealthy bool
	// Requirements are the template's requirements plus its labels.
	Requirements requirements.Requirements
	// Taints are put on every machine of the pool.
	Taints []corev1.Taint
	// StartupTaints are on machines while they start; pods need not tolerate them.
	StartupTaints []corev1.Taint
	// InstanceTypes are what the pool's NodeClass offers.
	InstanceTypes []*cloudprovider.InstanceType
	// Remaining is what is left of the pool's limits (capacity, not allocatable); nil means no
	// limits. A resource absent from a non-nil Remaining is unlimited.
	Remaining corev1.ResourceList
	// NodeCost is added to the hourly price of every machine of the pool when plans are
	// compared: what each node costs beyond its instance price (root volume, IP address,
	// per-node licences and agents). It moves plans towards fewer, larger machines.
	NodeCost float64
}

// ExistingNode is a node, or an in-flight NodeClaim that has no node yet.
type ExistingNode struct {
	// Name identifies the node (or NodeClaim).
	Name string
	// Labels are the node's labels; an in-flight NodeClaim's resolved labels.
	Labels map[string]string
	// Taints are the node's taints.
	Taints []corev1.Taint
	// Allocatable is what pods can use.
	Allocatable corev1.ResourceList
	// Pods are the pods bound or nominated to the node.
	Pods []*corev1.Pod
	// Requested, when set, is Requests(Pods), computed once by a caller that solves many times
	// over the same nodes (the disruption core); the solver then does not sum the pods again.
	// It is ignored when the input has Attachments.
	Requested corev1.ResourceList
	// Undecided are, for an in-flight NodeClaim, the values it may still take for keys its
	// Labels leave out (a zone among several): its pods count against required anti-affinity in
	// every one of them, since the launch may land in any.
	Undecided map[string][]string
	// Unschedulable nodes (cordoned or being deleted) take no pods but count for topology.
	Unschedulable bool
	// RefusesMoved nodes take none of the input's Moved pods (pending pods they take): a node
	// still inside its NodePool's consolidateAfter receives no pod a consolidation moves
	// (Karpenter v1.15).
	RefusesMoved bool
	// VolumeLimits are the most CSI volumes of each driver the node can attach (its CSINode's
	// allocatable counts); a driver not listed is not limited.
	VolumeLimits map[string]int64
}

// Options tune a solve.
type Options struct {
	// IgnorePreferences treats every preference as absent from the start.
	IgnorePreferences bool
	// MaxInstanceTypes bounds the candidate instance types of a planned NodeClaim (default 60).
	MaxInstanceTypes int
	// MinValuesBestEffort plans a claim even when fewer types than a requirement's minValues fit
	// (Karpenter's MIN_VALUES_POLICY=BestEffort); by default such a pod is unschedulable.
	MinValuesBestEffort bool
	// FewerMachines merges planned claims pairwise while one machine holding both costs no more
	// than the two (within half a percent): fewer, larger machines at equal price. Off by default:
	// on scale-downs with pod deletion costs, smaller machines are emptied whole with fewer
	// evictions (see coalesce.go).
	FewerMachines bool
	// LargestAtTies fills each new claim towards the largest of the near-tied target types, as
	// the solver did before bursts were spread over machines of an eighth of their CPU
	// (burstShare in sizing.go); for measuring that rule against its absence.
	LargestAtTies bool
	// FillLimits plans again when a NodePool's limits leave pods out, with the pool's types
	// narrowed to those that run the most of them within the limits, and keeps the plan that
	// places more (fillLimits). Provisioning sets it; disruption's simulations, which only ask
	// whether pods fit, do not pay the second solve.
	FillLimits bool
	// Cache, when set, keeps what consecutive Solves over the same NodePools and nodes share
	// (see Cache); nil prepares every Solve from scratch.
	Cache *Cache
}

// Result is a plan.
type Result struct {
	// NodeClaims are the machines to buy, in creation order.
	NodeClaims []*PlannedNodeClaim
	// Bindings place pods on existing nodes.
	Bindings []Binding
	// Unschedulable are the pods that fit nowhere, with why.
	Unschedulable []PodError

	// slotsLeft are the capacity reservations' machines the plan left; fellBack is set when a
	// claim planned at a reservation's price got none of its machines (reservations.go).
	slotsLeft map[string]int
	fellBack  bool
}

// PlannedNodeClaim is one machine to buy.
type PlannedNodeClaim struct {
	// NodePool is the pool it comes from.
	NodePool string
	// Requirements are the pool's requirements narrowed by its pods.
	Requirements requirements.Requirements
	// InstanceTypes can each hold all its pods, cheapest first, at most Options.MaxInstanceTypes
	// (more only when minValues needs them).
	InstanceTypes []*cloudprovider.InstanceType
	// Requests are the summed requests of its pods and daemonsets.
	Requests corev1.ResourceList
	// Pods are the pods planned onto it.
	Pods []*corev1.Pod
	// Price is the hourly price of the cheapest instance type and offering, plus the pool's
	// NodeCost.
	Price float64
	// MinValuesRelaxed: with Options.MinValuesBestEffort, a requirement's minValues was lowered
	// to the values its instance types have (Karpenter's nodeclaim-min-values-relaxed).
	MinValuesRelaxed bool
}

// SetInstanceTypes makes its the claim's instance types and narrows its requirements to their
// names, so that a NodeClaim made from it allows no other type. Requirements must be the claim's
// own (not shared with another claim).
func (nc *PlannedNodeClaim) SetInstanceTypes(its []*cloudprovider.InstanceType) {
	names := make([]string, len(its))
	for i, it := range its {
		names[i] = it.Name
	}
	nc.InstanceTypes = its
	nc.Requirements.Add(requirements.MustNew(karpv1.InstanceTypeLabelKey, requirements.In, names...))
}

// MinValuesShortfall names the first requirement (by key) whose minValues the claim's instance
// types do not meet — its key, the minValues and how many of its values the types have — or
// returns "" when every one is met.
func (nc *PlannedNodeClaim) MinValuesShortfall() (key string, want, have int) {
	nc.Requirements.Each(func(r requirements.Requirement) {
		if key != "" || r.MinValues == 0 {
			return
		}
		if n := labelValues(nc.InstanceTypes, r); n < r.MinValues {
			key, want, have = r.Key, r.MinValues, n
		}
	})
	return key, want, have
}

// RelaxMinValues lowers every minValues the claim's instance types do not meet to what they have
// (Options.MinValuesBestEffort), records it in MinValuesRelaxed, and reports whether it lowered any.
func (nc *PlannedNodeClaim) RelaxMinValues() bool {
	var lowered []requirements.Requirement
	nc.Requirements.Each(func(r requirements.Requirement) {
		if r.MinValues == 0 {
			return
		}
		if n := labelValues(nc.InstanceTypes, r); r.MinValues > n {
			r.MinValues = n
			lowered = append(lowered, r)
		}
	})
	for _, r := range lowered {
		nc.Requirements.Set(r)
	}
	nc.MinValuesRelaxed = nc.MinValuesRelaxed || len(lowered) > 0
	return len(lowered) > 0
}

// labelValues counts the distinct values of r's key, among those r allows, that the types' labels
// have: what minValues counts.
func labelValues(its []*cloudprovider.InstanceType, r requirements.Requirement) int {
	seen := map[string]bool{}
	for _, it := range its {
		// A label of the type: its requirement on the key has exactly one value.
		if q, ok := it.Requirements.Get(r.Key); ok && q.IsFinite() && len(q.Values()) == 1 && r.Allows(q.Values()[0]) {
			seen[q.Values()[0]] = true
		}
	}
	return len(seen)
}

// Binding places a pod on an existing node.
type Binding struct {
	Pod  *corev1.Pod
	Node string
}

// PodError says why a pod fits nowhere.
type PodError struct {
	Pod *corev1.Pod
	// Reason names every NodePool and why it cannot take the pod (or why none was tried).
	Reason string
	// Pools says, per NodePool in the solve's order, why a new machine from it cannot take the
	// pod; empty when no NodePool was tried (no NodePool, or the pod's own constraints conflict).
	Pools []PoolMiss
}

// PoolMiss says why a new machine from one NodePool cannot take a pod.
type PoolMiss struct {
	NodePool string `json:"nodePool"`
	// Stage is the check the pod failed; the pods get further through a NodePool's checks in
	// the order of the stages.
	Stage  MissStage `json:"failedCheck"`
	Reason string    `json:"reason"`
}

// MissStage is the check of a NodePool a pod failed, in the order the solver makes them.
type MissStage int

const (
	// MissRequirements: the pod's requirements conflict with the NodePool's, or no instance
	// type of it satisfies them (or the pod names existing nodes only).
	MissRequirements MissStage = iota
	// MissTaint: a taint of the NodePool is not tolerated.
	MissTaint
	// MissResources: no instance type is large enough (after DaemonSet overhead), or a
	// DaemonSet holds the pod's host port on every type that is.
	MissResources
	// MissLimits: the NodePool's limits leave too little for any type that fits.
	MissLimits
	// MissPlacement: the pod's topology constraints or the NodePool's minValues cannot be met.
	MissPlacement
)

// String names the stage.
func (m MissStage) String() string {
	switch m {
	case MissTaint:
		return "taint"
	case MissRequirements:
		return "requirements"
	case MissResources:
		return "resources"
	case MissLimits:
		return "limits"
	case MissPlacement:
		return "placement"
	}
	return fmt.Sprintf("MissStage(%d)", int(m))
}

// MarshalText names the stage in JSON and YAML.
func (m MissStage) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// Ranked are the per-NodePool misses, closest first (ties in the solve's order).
func (e PodError) Ranked() []PoolMiss {
	out := slices.Clone(e.Pools)
	slices.SortStableFunc(out, func(a, b PoolMiss) int { return cmp.Compare(b.Stage, a.Stage) })
	return out
}

// Closest is the NodePool the pod got furthest with — the one whose check it failed came last
// (the first such NodePool in the solve's order) — and false when no NodePool was tried.
func (e PodError) Closest() (PoolMiss, bool) {
	if len(e.Pools) == 0 {
		return PoolMiss{}, false
	}
	best := e.Pools[0]
	for _, m := range e.Pools[1:] {
		if m.Stage > best.Stage {
			best = m
		}
	}
	return best, true
}

// Price sums the planned NodeClaims' prices.
func (r *Result) Price() float64 {
	var p float64
	for _, nc := range r.NodeClaims {
		p += nc.Price
	}
	return p
}
