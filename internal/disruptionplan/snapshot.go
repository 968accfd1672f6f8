package disruptionplan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/solver"
)

// Snapshot is the cluster as one decision sees it. The decision only reads it.
type Snapshot struct {
	// Now is the time of the decision.
	Now time.Time
	// NodePools are the pools Capstan manages, with their catalogs and remaining limits.
	NodePools []Pool
	// SpendingLeft is what is left of the cluster's spending limit in dollars per hour, every
	// NodeClaim counted (the candidates too: a replacement must fit beside what it replaces);
	// nil without one.
	SpendingLeft *float64
	// Nodes are the pools' NodeClaims, with their Nodes once registered.
	Nodes []*Node
	// Pending are the pods waiting for a node: consolidation must not take the room they need.
	Pending []*corev1.Pod
	// Buffer are the CapacityBuffers' virtual pods: the room they have must stay.
	Buffer []*corev1.Pod
	// PDBs are the PodDisruptionBudgets, with their status.
	PDBs []*policyv1.PodDisruptionBudget
	// DaemonSetPods are one pod per DaemonSet (its template), charged to new machines.
	DaemonSetPods []*corev1.Pod
	// NamespaceLabels are namespaces' labels, for pod-affinity namespace selectors.
	NamespaceLabels map[string]map[string]string
	// WellKnownLabels are the cloud provider's label keys (solver.Input.WellKnownLabels).
	WellKnownLabels []string
	// OtherNodes are nodes no pool manages (static nodes, other autoscalers'): pods may move
	// there, and they count for topology, but they are never candidates.
	OtherNodes []solver.ExistingNode
	// Evictions are the pods consolidation evicted recently, for the churn guard.
	Evictions []Eviction
	// ScaleDowns are the recent scale-downs of scalable owners (ReplicaSets, StatefulSets): under-
	// used nodes are not judged while the cluster still moves after one (ScaleDownWait).
	ScaleDowns []ScaleDown
}

// ScaleDown is a scalable owner seen shrinking: its desired replicas fell, or it still has more
// replicas than it wants.
type ScaleDown struct {
	// Owner names it ("ReplicaSet default/web"); UID is its UID, as its pods' controller
	// references give it.
	Owner string
	UID   types.UID
	// At is when it was last seen shrinking; Since is when it began to, in a run of sightings
	// each within ScaleDownWait of the last.
	At, Since time.Time
}

// Pool is a NodePool and what the solver needs of it.
type Pool struct {
	// NodePool is the API object (disruption policy, budgets, template).
	NodePool *karpv1.NodePool
	// Solver is the pool in the solver's terms: requirements, taints, instance types with
	// offerings and prices, what is left of the limits, the per-node cost.
	Solver solver.NodePool
}

// Node is one machine: its NodeClaim, its Node once registered, and the pods on it.
type Node struct {
	// NodeClaim is the claim; every managed machine has one.
	NodeClaim *karpv1.NodeClaim
	// Node is nil until the machine registers.
	Node *corev1.Node
	// Pods are the pods bound to the node that have not finished (DaemonSet and mirror pods
	// included; the decision sorts them out).
	Pods []*corev1.Pod
}

// Name is the node's name, or the claim's while it has no node.
func (n *Node) Name() string {
	if n.Node != nil {
		return n.Node.Name
	}
	return n.NodeClaim.Name
}

// Eviction is a pod consolidation evicted, and when.
type Eviction struct {
	// Namespace and Name identify the evicted pod; a StatefulSet's pod comes back with them.
	Namespace, Name string
	// Owner is the UID of the pod's controller; the pod that replaces a ReplicaSet's pod is the
	// one its controller created right after.
	Owner types.UID
	// At is when the pod was evicted.
	At time.Time
}

// Options tune a decision. The zero value is Karpenter's defaults.
type Options struct {
	// SpotToSpotConsolidation lets consolidation replace a spot machine with a cheaper spot
	// machine (Karpenter's feature gate of that name, default off).
	SpotToSpotConsolidation bool
	// NodeRepair replaces nodes whose conditions match a repair policy past its toleration
	// (Karpenter's feature gate of that name, default off); RepairPolicies are the policies (nil:
	// DefaultRepairPolicies).
	NodeRepair     bool
	RepairPolicies []RepairPolicy
	// TerminateFirstDrift and TerminateFirstRepair (Karpenter's gates of those names, default
	// off): a drifted or unhealthy node in a capacity reservation whose pods have nowhere to go
	// but the machine it holds there is deleted before its replacement is launched
	// (terminateFirst).
	TerminateFirstDrift, TerminateFirstRepair bool
	// MultiNodeTimeout bounds the time of the search for a multi-node consolidation (default 1
	// minute), as Elapsed measures it; MultiNodeSolves bounds its simulations (default 200).
	MultiNodeTimeout time.Duration
	MultiNodeSolves  int
	// SingleNodeSolves bounds the candidates single-node consolidation simulates (default 100).
	SingleNodeSolves int
	// EvictionMemory is how long a pod consolidation evicted protects the pod that replaced it
	// from another consolidation (default one hour).
	EvictionMemory time.Duration
	// ReplacementSettle is how long after a replacement's machine is initialised (a NodeClaim a
	// disruption launched) it is kept from consolidation, whatever consolidateAfter says (default
	// 2 minutes; negative: only consolidateAfter from its creation). The pods it was bought for
	// come only once its candidates are drained and their controllers create them again, which an
	// API server restart or a busy controller manager delays by tens of seconds; taken as empty
	// before then, it is gone when they arrive and the provisioner buys again.
	ReplacementSettle time.Duration
	// DisablePlanning turns off the look past budgets (Decision.Planned); benchmarks and replays
	// compare with it.
	DisablePlanning bool
	// DisableScaleDownWait turns off the wait for scale-downs in progress (consolidation of
	// under-used nodes waits while controllers' pods terminate, nodes a scale-down emptied wait
	// for emptiness, or within ScaleDownWait of an owner's scale-down); benchmarks and replays
	// compare with it.
	DisableScaleDownWait bool
	// ScaleDownWait is how long after an owner was last seen shrinking under-used nodes are not
	// judged (default 30 s, a default consolidateAfter: a scale-in arrives in several steps,
	// each thinning the nodes the last one left).
	ScaleDownWait time.Duration
	// MaxScaleDownHold bounds how long scale-downs in a row hold under-used nodes back (default
	// 5 minutes): owners that keep shrinking, one after the other, must not stop consolidation.
	MaxScaleDownHold time.Duration
	// UnderutilizedK is the k of WhenEmptyOrUnderutilized pools: a consolidation there must
	// score (saving against disruption, as Balanced scores) at least 1/UnderutilizedK. Zero is
	// DefaultUnderutilizedK; a negative value turns the score off, taking every saving as
	// Karpenter does under that policy.
	UnderutilizedK float64
	// CalmAfterScaleDown is how long after an owner was last seen shrinking a consolidation
	// (WhenEmptyOrUnderutilized with its score on, or Balanced) that evicts its pods must score at
	// least 1/CalmK (4) rather than 1/k (default 10 minutes; negative: never). A load that has just fallen
	// often falls again: the next step of the scale-in deletes pods a marginal move would have
	// evicted, and empties the machines for free.
	CalmAfterScaleDown time.Duration
	// Solver are the solver's options (preferences, minValues policy).
	Solver solver.Options
	// Elapsed reports the time spent so far in the decision; the controller passes a real
	// clock's. Nil means no time bound: only the solve counts bound the search, and the same
	// snapshot always gives the same decision (tests, benchmarks, replays).
	Elapsed func() time.Duration
}

// Defaults for Options.
const (
	DefaultMultiNodeTimeout = time.Minute
	DefaultMultiNodeSolves  = 200
	DefaultSingleNodeSolves = 100
	DefaultEvictionMemory   = time.Hour
	DefaultScaleDownWait    = 30 * time.Second
	DefaultMaxScaleDownHold = 5 * time.Minute
	// DefaultCalmAfterScaleDown is Options.CalmAfterScaleDown's default.
	DefaultCalmAfterScaleDown = 10 * time.Minute
	// DefaultReplacementSettle is Options.ReplacementSettle's default.
	DefaultReplacementSettle = 2 * time.Minute
	// MaxMultiNodeCandidates bounds the candidates one multi-node command disrupts (Karpenter's
	// bound).
	MaxMultiNodeCandidates = 100
	// MinSpotToSpotTypes is how many cheaper spot types must remain for a spot machine to be
	// replaced by spot: fewer would chase the cheapest, most interrupted pools.
	MinSpotToSpotTypes = 15
)

// ChurnMemory is EvictionMemory, or its default when unset: how long an eviction is worth
// remembering for the churn guard.
func (o Options) ChurnMemory() time.Duration { return o.withDefaults().EvictionMemory }

func (o Options) withDefaults() Options {
	if o.MultiNodeTimeout == 0 {
		o.MultiNodeTimeout = DefaultMultiNodeTimeout
	}
	if o.MultiNodeSolves <= 0 {
		o.MultiNodeSolves = DefaultMultiNodeSolves
	}
	if o.SingleNodeSolves <= 0 {
		o.SingleNodeSolves = DefaultSingleNodeSolves
	}
	if o.EvictionMemory == 0 {
		o.EvictionMemory = DefaultEvictionMemory
	}
	if o.ScaleDownWait <= 0 {
		o.ScaleDownWait = DefaultScaleDownWait
	}
	if o.UnderutilizedK == 0 {
		o.UnderutilizedK = DefaultUnderutilizedK
	}
	if o.MaxScaleDownHold <= 0 {
		o.MaxScaleDownHold = DefaultMaxScaleDownHold
	}
	if o.CalmAfterScaleDown == 0 {
		o.CalmAfterScaleDown = DefaultCalmAfterScaleDown
	}
	if o.ReplacementSettle == 0 {
		o.ReplacementSettle = DefaultReplacementSettle
	}
	return o
}
