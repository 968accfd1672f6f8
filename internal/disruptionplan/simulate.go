package disruptionplan

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// simulation asks the solver where pods would go without some nodes.
type simulation struct {
	d *decider
	// nodes are the snapshot's nodes that stay, as the solver sees them; index maps a node to
	// its position. Nodes being disrupted are not among them: their pods move.
	nodes []solver.ExistingNode
	index map[*Node]int
	// last are nodes (by position) the pods try after all others: nodes planned to go.
	last map[int]bool
	// empty are the empty nodes emptiness would take, by name, which pods try after every node
	// that is not last: a pod put there keeps a machine that would otherwise go (consolidate
	// counts its price).
	empty map[string]*Candidate
	// eventually makes the simulations judge where the cluster can end rather than what may move
	// now: nodes inside their consolidateAfter take moved pods (their window passes).
	eventually bool
	// moving are the pods of nodes being disrupted; pending the pods waiting for a node.
	moving, pending []*corev1.Pod
	// buffer are the CapacityBuffers' chunks that have room on the nodes that stay (every
	// removal must leave them room), by node in bufferOn.
	buffer   []*corev1.Pod
	bufferOn map[string][]*corev1.Pod
	// wellKnown and pools are the solver's input that every simulation shares.
	wellKnown []string
	pools     []solver.NodePool
	solves    int
	// cache keeps what the simulations' solves share: they run over the same pools and nodes.
	cache *solver.Cache
	// scratch is the node list each simulation hands the solver.
	scratch []solver.ExistingNode
	// uninitialized are the nodes that have not initialized (launching, registering or stuck),
	// by name: a disruption never counts on one (it may never come up).
	uninitialized map[string]bool
}

func newSimulation(d *decider) *simulation {
	s := &simulation{d: d, index: map[*Node]int{}, pending: d.snap.Pending, wellKnown: d.snap.WellKnownLabels, cache: solver.NewCache()}
	if s.wellKnown == nil {
		// What the solver would compute on every solve: the keys some instance type defines.
		keys := map[string]bool{}
		for i := range d.snap.NodePools {
			for _, it := range d.snap.NodePools[i].Solver.InstanceTypes {
				it.Requirements.Each(func(r requirements.Requirement) { keys[r.Key] = true })
			}
		}
		s.wellKnown = slices.Sorted(maps.Keys(keys))
	}
	for i := range d.snap.NodePools {
		s.pools = append(s.pools, d.snap.NodePools[i].Solver)
	}
	s.nodes = append(s.nodes, d.snap.OtherNodes...)
	for _, n := range d.snap.Nodes {
		// A node being deleted or tainted by a command is leaving: its pods move.
		if !n.NodeClaim.DeletionTimestamp.IsZero() || n.Node != nil && (!n.Node.DeletionTimestamp.IsZero() || nodeclaims.Disrupted(n.Node)) {
			for _, p := range n.Pods {
				if pods.Reschedulable(p) {
					s.moving = append(s.moving, p)
				}
			}
			continue
		}
		en, ok := d.existing(n)
		if !ok {
			continue
		}
		if !meta.IsStatusConditionTrue(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInitialized) {
			if s.uninitialized == nil {
				s.uninitialized = map[string]bool{}
			}
			s.uninitialized[en.Name] = true
		}
		en.RefusesMoved = d.underConsolidateAfter(n)
		s.index[n] = len(s.nodes)
		s.nodes = append(s.nodes, en)
	}
	for _, c := range d.all {
		if c.emptinessWillTake() {
			if s.empty == nil {
				s.empty = map[string]*Candidate{}
			}
			s.empty[c.Name()] = c
		}
	}
	if len(d.snap.Buffer) > 0 {
		// Where the buffers' chunks have room now; chunks without room are the provisioner's
		// to buy, not a reason to hold every move.
		s.bufferOn = map[string][]*corev1.Pod{}
		for _, b := range s.solve(d.snap.Buffer, s.nodes, nil).Bindings {
			s.buffer = append(s.buffer, b.Pod)
			s.bufferOn[b.Node] = append(s.bufferOn[b.Node], b.Pod)
		}
	}
	return s
}

// existing is the node as the solver sees it, as the provisioner sees it too: its taints as pods
// will see them once it is up; an in-flight claim is the machine it will be, with the pods
// nominated to it.
func (d *decider) existing(n *Node) (solver.ExistingNode, bool) {
	if n.Node != nil {
		return solver.ExistingNode{Name: n.Node.Name, Labels: n.Node.Labels, Taints: nodeclaims.SchedulingTaints(n.Node, n.NodeClaim),
			Allocatable: n.Node.Status.Allocatable, Pods: n.Pods, Requested: solver.Requests(n.Pods), Unschedulable: n.Node.Spec.Unschedulable}, true
	}
	pool := d.pools[n.NodeClaim.Labels[karpv1.NodePoolLabelKey]]
	if pool == nil {
		return solver.ExistingNode{}, false
	}
	en, ok := nodeclaims.InFlight(n.NodeClaim, pool.Solver.InstanceTypes, d.snap.DaemonSetPods)
	if !ok {
		return en, false
	}
	en.Pods = append(en.Pods, n.Pods...)
	en.Requested = solver.Requests(en.Pods)
	return en, true
}

// simResult is where the pods of a set of nodes would go.
type simResult struct {
	// failed says why the set cannot go ("" when it can).
	failed string
	// replacements are the new machines the pods of the set (or of nodes already being
	// disrupted) need; machines only pending pods need are the provisioner's business.
	replacements []*solver.PlannedNodeClaim
	// bindings are where the required pods go on existing nodes.
	bindings []solver.Binding
}

// run simulates removing the set: its pods, and those of nodes already being disrupted, must all
// fit on the remaining nodes plus new machines; pending pods are placed too, so that room they
// need is not promised twice, but need not fit.
func (s *simulation) run(set []*Candidate) simResult {
	return s.runWith(set, s.pools)
}

// runOne simulates removing the set for a consolidation, which launches at most one machine:
// when the plan spreads the pods that need new machines over several (the solver prices
// capacity, and several small machines are often cheapest), it plans again with only the pool
// types that can hold all of those pods at once.
func (s *simulation) runOne(set []*Candidate) simResult {
	res := s.run(set)
	if res.failed != "" || len(res.replacements) <= 1 {
		return res
	}
	var moving []*corev1.Pod
	for _, r := range res.replacements {
		if r.NodePool != res.replacements[0].NodePool {
			return res
		}
		moving = append(moving, r.Pods...)
	}
	need := solver.Requests(moving)
	pools := make([]solver.NodePool, len(s.pools))
	for i, p := range s.pools {
		pools[i] = p
		if p.Name != res.replacements[0].NodePool {
			continue
		}
		pools[i].InstanceTypes = nil
		for _, it := range p.InstanceTypes {
			if it.Holds(need) {
				pools[i].InstanceTypes = append(pools[i].InstanceTypes, it)
			}
		}
	}
	if again := s.runWith(set, pools); again.failed == "" && len(again.replacements) == 1 {
		return again
	}
	return res
}

func (s *simulation) runWith(set []*Candidate, pools []solver.NodePool) simResult {
	out := make(map[int]bool, len(set))
	required := map[*corev1.Pod]bool{}
	// The candidates' pods go nowhere inside its consolidateAfter; those of nodes already leaving
	// and pending pods may (as Karpenter v1.15).
	moved := map[types.UID]bool{}
	pods := make([]*corev1.Pod, 0, len(s.moving)+len(s.pending))
	for _, c := range set {
		if i, ok := s.index[c.Node]; ok {
			out[i] = true
		}
		for _, p := range c.Reschedulable {
			required[p] = true
			moved[p.UID] = true
			pods = append(pods, p)
		}
	}
	for _, p := range s.moving {
		required[p] = true
		pods = append(pods, p)
	}
	for _, p := range s.buffer {
		required[p] = true
		pods = append(pods, p)
	}
	pods = append(pods, s.pending...)
	// The solver keeps nothing of its input's nodes, so one slice serves every simulation.
	nodes := s.scratch[:0]
	defer func() { s.scratch = nodes[:0] }()
	for _, empty := range []bool{false, true} {
		for i := range s.nodes {
			if !out[i] && !s.last[i] && (s.empty[s.nodes[i].Name] != nil) == empty {
				nodes = append(nodes, s.nodes[i])
			}
		}
	}
	for i := range s.nodes {
		if !out[i] && s.last[i] {
			nodes = append(nodes, s.nodes[i])
		}
	}
	refused := moved
	if s.eventually {
		refused = nil
	}
	plan := s.solveMoving(pods, nodes, pools, refused)
	for _, u := range plan.Unschedulable {
		if required[u.Pod] && capacitybuffer.IsVirtual(u.Pod) {
			return simResult{failed: fmt.Sprintf("the room CapacityBuffer %s keeps would not fit elsewhere: %s", capacitybuffer.Key(u.Pod), u.Reason)}
		}
		if required[u.Pod] {
			return simResult{failed: fmt.Sprintf("pod %s/%s would not fit elsewhere: %s", u.Pod.Namespace, u.Pod.Name, u.Reason)}
		}
	}
	var res simResult
	for _, b := range plan.Bindings {
		if moved[b.Pod.UID] && s.uninitialized[b.Node] {
			// As Karpenter: the pods would wait on a machine that may never come up, and a new
			// one for them would be bought again each round while it does not.
			return simResult{failed: fmt.Sprintf("pod %s/%s would go to node %s, which has not initialized", b.Pod.Namespace, b.Pod.Name, b.Node)}
		}
		if required[b.Pod] {
			res.bindings = append(res.bindings, b)
		}
	}
	for _, nc := range plan.NodeClaims {
		if slices.ContainsFunc(nc.Pods, func(p *corev1.Pod) bool { return required[p] }) {
			res.replacements = append(res.replacements, nc)
			// The solver tries such a pool last: it is here because no other pool takes the
			// pods. A replacement that does not register is rolled back after minutes, and the
			// next round would try again (sigs#3072): the set waits until the pool heals.
			if i := slices.IndexFunc(pools, func(p solver.NodePool) bool { return p.Name == nc.NodePool }); i >= 0 && pools[i].RegistrationUnhealthy {
				return simResult{failed: fmt.Sprintf("its pods need a new machine from NodePool %s, whose recent launches did not register (%s=False)",
					nc.NodePool, karpv1.ConditionTypeNodeRegistrationHealthy)}
			}
		}
	}
	return res
}

// placeable counts the pending pods that have somewhere to go: room on a node, or a new machine.
func (s *simulation) placeable() int {
	pods := append(slices.Clip(s.moving), s.pending...)
	pending := make(map[*corev1.Pod]bool, len(s.pending))
	for _, p := range s.pending {
		pending[p] = true
	}
	plan := s.solve(pods, s.nodes, s.pools)
	n := 0
	for _, b := range plan.Bindings {
		if pending[b.Pod] {
			n++
		}
	}
	for _, nc := range plan.NodeClaims {
		for _, p := range nc.Pods {
			if pending[p] {
				n++
			}
		}
	}
	return n
}

// solve runs the solver on the decision's shared input and counts the solve.
func (s *simulation) solve(pods []*corev1.Pod, nodes []solver.ExistingNode, pools []solver.NodePool) *solver.Result {
	return s.solveMoving(pods, nodes, pools, nil)
}

// solveMoving is solve with the pods a consolidation moves off its candidates (moved, by UID),
// which the nodes still inside their consolidateAfter do not take.
func (s *simulation) solveMoving(pods []*corev1.Pod, nodes []solver.ExistingNode, pools []solver.NodePool, moved map[types.UID]bool) *solver.Result {
	s.solves++
	opts := s.d.opts.Solver
	opts.Cache = s.cache
	return solver.Solve(solver.Input{Pods: pods, Nodes: nodes, NodePools: pools, DaemonSetPods: s.d.snap.DaemonSetPods,
		NamespaceLabels: s.d.snap.NamespaceLabels, WellKnownLabels: s.wellKnown, Moved: moved, SpendingLeft: s.d.snap.SpendingLeft}, opts)
}

// underConsolidateAfter reports whether the node is still inside its NodePool's consolidateAfter:
// initialized, and a pod arrived or left (or it initialized) less than consolidateAfter ago. A
// consolidation moves no pod onto such a node (Karpenter v1.15): a node just filled is the one
// most likely to be reshuffled next.
func (d *decider) underConsolidateAfter(n *Node) bool {
	pool := d.pools[n.NodeClaim.Labels[karpv1.NodePoolLabelKey]]
	if pool == nil || pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration == nil || *pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration == 0 {
		return false
	}
	init := meta.FindStatusCondition(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInitialized)
	if init == nil || init.Status != metav1.ConditionTrue {
		return false
	}
	since := init.LastTransitionTime.Time
	if t := n.NodeClaim.Status.LastPodEventTime.Time; t.After(since) {
		since = t
	}
	return d.snap.Now.Sub(since) < *pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration
}
