package replay

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/solver"
)

// Deployment is a trace's workload: identical pods whose count follows Replicas.
type Deployment struct {
	Name string
	// CPU and Memory are each pod's requests ("500m", "1Gi").
	CPU, Memory string
	// Replicas is the desired count at an offset from the trace's start.
	Replicas func(at time.Duration) int
}

// Config is the cluster a trace plays on.
type Config struct {
	// NodePool is the one pool (its disruption policy, budgets and consolidateAfter apply).
	NodePool *karpv1.NodePool
	// InstanceTypes is its catalog.
	InstanceTypes []*cloudprovider.InstanceType
	// Step is the simulated time between steps (default 10s); disruption rounds run every step.
	Step time.Duration
	// LaunchDelay is how long a new machine takes to be ready (default 30s).
	LaunchDelay time.Duration
	// ValidationPeriod is the wait before a decision is re-checked and carried out (default 15s).
	ValidationPeriod time.Duration
	// Disruption are the decision core's options; DisableDisruption turns rounds off.
	Disruption        disruptionplan.Options
	DisableDisruption bool
	// PodDeletionCost writes the decision core's deletion costs (disruptionplan.DeletionCosts) on the
	// pods, as the PodDeletionCostManagement gate does: every DeletionCostPeriod (default 30s), and
	// at the step after a pod was bound (the controller wakes on bindings, seconds after them);
	// the ReplicaSets' scale-ins read them.
	PodDeletionCost    bool
	DeletionCostPeriod time.Duration
	// Start is the simulated time of the first step.
	Start time.Time
	// Log, when set, receives a line per command carried out.
	Log func(string)
}

// Report is what a replay measured.
type Report struct {
	// CostHours is the summed hourly price of the machines over the trace, in dollars.
	CostHours float64
	// Evictions counts pods evicted by disruption commands; Reevictions those of them that
	// had been evicted before (the pod that replaced an evicted pod), pods moved twice.
	Evictions, Reevictions int
	// PendingPodSeconds sums, over steps, pending pods times the step.
	PendingPodSeconds float64
	// Commands counts the commands carried out, per method.
	Commands map[disruptionplan.Method]int
	// Launched counts machines launched; PeakNodes is the most at once.
	Launched, PeakNodes int
	// Lost counts evicted pods no controller recreates (a snapshot's bare pods); Interrupted the
	// pods of machines reclaimed by InterruptSpot.
	Lost, Interrupted int
}

// machine is a node in the replay.
type machine struct {
	node    *disruptionplan.Node
	price   float64
	readyAt time.Time
	// lastPodEvent is when a pod last arrived or left (podEvent), or when the machine initialized
	// if later.
	lastPodEvent time.Time
	// nominated pods wait for the machine to be ready.
	nominated []*corev1.Pod
	leaving   bool
	// planned is set while the last decision planned the machine for a later round
	// (disruptionplan.Decision.Planned): the scheduler prefers other machines.
	planned bool
}

// Cluster is the replayed cluster's state.
type Cluster struct {
	cfg   Config
	pools []disruptionplan.Pool
	// fixed is what a snapshot brings that the replay does not change: nodes no pool manages,
	// PodDisruptionBudgets, DaemonSet pods, namespaces' labels, well-known labels.
	fixed    disruptionplan.Snapshot
	now      time.Time
	machines []*machine
	pending  []*corev1.Pod
	byDep    map[string][]*corev1.Pod
	deps     map[string]Deployment
	seq      int
	report   Report
	// inflight is the command being carried out and when it was decided.
	decided   *disruptionplan.Command
	decidedAt time.Time
	executing *execution
	evictions []disruptionplan.Eviction
	// moved are the pods created to replace evicted pods.
	moved map[*corev1.Pod]bool
	// ranked is when deletion costs were last written; rankDue says a pod was bound since, which
	// wakes the controller (after its debounce of seconds): the next step ranks it.
	ranked  time.Time
	rankDue bool
	// scaleDowns are the deployments' last scale-downs.
	scaleDowns []disruptionplan.ScaleDown
	// unschedulable are the solver's answers for the pods it could place nowhere in the last solve.
	unschedulable []solver.PodError
}

type execution struct {
	cmd          *disruptionplan.Command
	replacements []*machine
}

// New makes an empty cluster.
func New(cfg Config) (*Cluster, error) {
	c := newCluster(cfg)
	reqs, err := nodepools.Requirements(cfg.NodePool)
	if err != nil {
		return nil, fmt.Errorf("reading the NodePool's requirements: %w", err)
	}
	c.pools = []disruptionplan.Pool{{NodePool: cfg.NodePool, Solver: solver.NodePool{Name: cfg.NodePool.Name, Requirements: reqs,
		InstanceTypes: cfg.InstanceTypes, Taints: cfg.NodePool.Spec.Template.Spec.Taints}}}
	return c, nil
}

func newCluster(cfg Config) *Cluster {
	if cfg.Step == 0 {
		cfg.Step = 10 * time.Second
	}
	if cfg.LaunchDelay == 0 {
		cfg.LaunchDelay = 30 * time.Second
	}
	if cfg.ValidationPeriod == 0 {
		cfg.ValidationPeriod = 15 * time.Second
	}
	if cfg.DeletionCostPeriod == 0 {
		cfg.DeletionCostPeriod = 30 * time.Second
	}
	if cfg.Start.IsZero() {
		cfg.Start = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
	}
	return &Cluster{cfg: cfg, now: cfg.Start, byDep: map[string][]*corev1.Pod{}, deps: map[string]Deployment{},
		report: Report{Commands: map[disruptionplan.Method]int{}}, moved: map[*corev1.Pod]bool{}}
}

// FromSnapshot makes the cluster a decision snapshot shows — its pools, machines (priced at
// their offerings), pods, pending pods, other nodes, PDBs and DaemonSets — at the snapshot's
// time; cfg's NodePool and InstanceTypes are not used. A machine whose NodeClaim is
// Consolidatable has waited out consolidateAfter; the others start waiting now. Machines still
// launching are ready after the launch delay. Pods evicted later come back pending as copies
// when a controller owns them (Report.Lost counts the others).
func FromSnapshot(snap *disruptionplan.Snapshot, cfg Config) (*Cluster, error) {
	cfg.Start = snap.Now
	c := newCluster(cfg)
	c.pools = snap.NodePools
	c.fixed = disruptionplan.Snapshot{OtherNodes: snap.OtherNodes, PDBs: snap.PDBs, DaemonSetPods: snap.DaemonSetPods,
		NamespaceLabels: snap.NamespaceLabels, WellKnownLabels: snap.WellKnownLabels}
	c.evictions, c.scaleDowns = slices.Clone(snap.Evictions), slices.Clone(snap.ScaleDowns)
	for _, n := range snap.Nodes {
		pool := c.poolOf(n.NodeClaim.Labels[karpv1.NodePoolLabelKey])
		if pool == nil {
			return nil, fmt.Errorf("NodeClaim %s: its NodePool %q is not in the snapshot", n.NodeClaim.Name, n.NodeClaim.Labels[karpv1.NodePoolLabelKey])
		}
		price, _ := disruptionplan.NodePrice(n, pool)
		m := &machine{node: &disruptionplan.Node{NodeClaim: n.NodeClaim.DeepCopy()}, price: price, readyAt: c.now, lastPodEvent: c.now}
		if n.Node != nil {
			m.node.Node = n.Node.DeepCopy()
			for _, p := range n.Pods {
				m.node.Pods = append(m.node.Pods, p.DeepCopy())
			}
			if after := pool.NodePool.Spec.Disruption.ConsolidateAfter.Duration; after != nil &&
				meta.IsStatusConditionTrue(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable) {
				m.lastPodEvent = c.now.Add(-*after)
			}
		} else {
			m.readyAt = c.now.Add(cfg.LaunchDelay)
		}
		m.planned = m.node.Node != nil && nodeclaims.Planned(m.node.Node)
		c.machines = append(c.machines, m)
	}
	for _, p := range snap.Pending {
		c.pending = append(c.pending, p.DeepCopy())
	}
	return c, nil
}

// poolOf is the pool of that name, or nil.
func (c *Cluster) poolOf(name string) *disruptionplan.Pool {
	for i := range c.pools {
		if c.pools[i].NodePool.Name == name {
			return &c.pools[i]
		}
	}
	return nil
}

// Run plays the deployments for d and returns the report.
func (c *Cluster) Run(deps []Deployment, d time.Duration) Report {
	for _, dep := range deps {
		c.deps[dep.Name] = dep
	}
	end := c.now.Add(d)
	for c.now.Before(end) {
		at := c.now.Sub(c.cfg.Start)
		c.rankDeletionCosts()
		for _, dep := range deps {
			c.scaleTo(dep, dep.Replicas(at))
		}
		c.Step()
	}
	return c.report
}

// Step advances the cluster by one step: machines come up, pending pods are placed, a disruption
// round runs, and the step's cost and waiting are counted.
func (c *Cluster) Step() {
	c.bringUp()
	c.schedule()
	if !c.cfg.DisableDisruption {
		c.disrupt()
	}
	hours := c.cfg.Step.Hours()
	for _, m := range c.machines {
		c.report.CostHours += m.price * hours
	}
	c.report.PendingPodSeconds += float64(len(c.pending)+c.nominatedCount()) * c.cfg.Step.Seconds()
	c.report.PeakNodes = max(c.report.PeakNodes, len(c.machines))
	c.now = c.now.Add(c.cfg.Step)
}

// Report is what the replay measured so far.
func (c *Cluster) Report() Report { return c.report }

// Nodes is the number of machines.
func (c *Cluster) Nodes() int { return len(c.machines) }

// Price is the cluster's hourly price now.
func (c *Cluster) Price() float64 {
	p := 0.0
	for _, m := range c.machines {
		p += m.price
	}
	return p
}

func (c *Cluster) nominatedCount() int {
	n := 0
	for _, m := range c.machines {
		n += len(m.nominated)
	}
	return n
}

// rankDeletionCosts writes the decision core's deletion costs on the pods, when the
// configuration asks for it and its period has passed.
func (c *Cluster) rankDeletionCosts() {
	if !c.cfg.PodDeletionCost || !c.rankDue && c.now.Sub(c.ranked) < c.cfg.DeletionCostPeriod {
		return
	}
	c.ranked, c.rankDue = c.now, false
	costs := disruptionplan.DeletionCosts(c.Snapshot(), c.cfg.Disruption)
	for _, m := range c.machines {
		v, ok := costs[m.node.Name()]
		for _, p := range m.node.Pods {
			// As the controller writes them, with Capstan's record of the value: the decision
			// core tells its own values from users' by it.
			if ok {
				pods.SetDeletionCost(p, v)
			} else {
				pods.ClearDeletionCost(p)
			}
		}
	}
}

// deletionCost is the pod's controller.kubernetes.io/pod-deletion-cost, 0 when unset.
func deletionCost(p *corev1.Pod) int {
	v, _ := strconv.Atoi(p.Annotations[corev1.PodDeletionCost])
	return v
}

// scaleTo creates or deletes the deployment's pods. Scale-down removes pending pods first, then
// as the ReplicaSet ranks them: lowest deletion cost first, then pods on the machines holding
// most of the deployment, newest first.
func (c *Cluster) scaleTo(dep Deployment, n int) {
	pods := c.byDep[dep.Name]
	for len(pods) < n {
		c.seq++
		p := newPod(fmt.Sprintf("%s-%d", dep.Name, c.seq), dep, c.now)
		pods = append(pods, p)
		c.pending = append(c.pending, p)
	}
	if len(pods) > n {
		c.shrank("ReplicaSet default/"+dep.Name, replicaSetUID(dep))
		perNode := map[string]int{}
		for _, p := range pods {
			perNode[p.Spec.NodeName]++
		}
		sort.SliceStable(pods, func(i, j int) bool {
			a, b := pods[i], pods[j]
			if (a.Spec.NodeName == "") != (b.Spec.NodeName == "") {
				return a.Spec.NodeName == ""
			}
			if ca, cb := deletionCost(a), deletionCost(b); ca != cb {
				return ca < cb
			}
			if perNode[a.Spec.NodeName] != perNode[b.Spec.NodeName] {
				return perNode[a.Spec.NodeName] > perNode[b.Spec.NodeName]
			}
			return a.CreationTimestamp.After(b.CreationTimestamp.Time)
		})
		for _, p := range pods[:len(pods)-n] {
			c.remove(p)
		}
		pods = pods[len(pods)-n:]
	}
	c.byDep[dep.Name] = pods
}

// shrank records a scale-down of the owner now (its run continues when the last was within
// the default scale-down wait).
func (c *Cluster) shrank(owner string, uid types.UID) {
	since := c.now
	for i, sd := range c.scaleDowns {
		if sd.Owner == owner {
			if c.now.Sub(sd.At) < disruptionplan.DefaultScaleDownWait {
				since = sd.Since
			}
			c.scaleDowns = slices.Delete(c.scaleDowns, i, i+1)
			break
		}
	}
	c.scaleDowns = append(c.scaleDowns, disruptionplan.ScaleDown{Owner: owner, UID: uid, At: c.now, Since: since})
}

// remove deletes a pod wherever it is.
func (c *Cluster) remove(p *corev1.Pod) {
	delete(c.moved, p)
	c.pending = slices.DeleteFunc(c.pending, func(q *corev1.Pod) bool { return q == p })
	for _, m := range c.machines {
		before := len(m.node.Pods) + len(m.nominated)
		m.node.Pods = slices.DeleteFunc(m.node.Pods, func(q *corev1.Pod) bool { return q == p })
		m.nominated = slices.DeleteFunc(m.nominated, func(q *corev1.Pod) bool { return q == p })
		if len(m.node.Pods)+len(m.nominated) != before {
			c.podEvent(m, p)
		}
	}
}

// replicaSetUID is the UID of the deployment's ReplicaSet: its pods' controller, and the owner its
// scale-downs name.
func replicaSetUID(dep Deployment) types.UID { return types.UID("rs-" + dep.Name) }

func newPod(name string, dep Deployment, now time.Time) *corev1.Pod {
	cpu, mem := resource.MustParse(dep.CPU), resource.MustParse(dep.Memory)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: map[string]string{"app": dep.Name},
			CreationTimestamp: metav1.NewTime(now),
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: dep.Name,
				UID: replicaSetUID(dep), Controller: new(true)}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// bringUp makes machines whose launch delay passed ready, binding their nominated pods.
func (c *Cluster) bringUp() {
	for _, m := range c.machines {
		if m.node.Node != nil || c.now.Before(m.readyAt) {
			continue
		}
		nc := m.node.NodeClaim
		capacity, allocatable := nc.Status.Capacity, nc.Status.Allocatable
		if it := c.instanceType(nc.Labels[karpv1.NodePoolLabelKey], nc.Labels[karpv1.InstanceTypeLabelKey]); it != nil {
			capacity, allocatable = it.Capacity, it.Allocatable()
		}
		m.node.Node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nc.Name, Labels: maps.Clone(nc.Labels), CreationTimestamp: metav1.NewTime(c.now)},
			Spec: corev1.NodeSpec{ProviderID: nc.Status.ProviderID, Taints: nc.Spec.Taints},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
		nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue,
			Reason: "Initialized", LastTransitionTime: metav1.NewTime(c.now)})
		for _, p := range m.nominated {
			c.bind(p, m)
		}
		m.nominated = nil
		m.lastPodEvent = c.now
	}
}

// instanceType is the pool's instance type of that name, or nil.
func (c *Cluster) instanceType(pool, name string) *cloudprovider.InstanceType {
	if p := c.poolOf(pool); p != nil {
		for _, it := range p.Solver.InstanceTypes {
			if it.Name == name {
				return it
			}
		}
	}
	return nil
}

func (c *Cluster) bind(p *corev1.Pod, m *machine) {
	p.Spec.NodeName = m.node.Name()
	p.Status.Phase = corev1.PodRunning
	m.node.Pods = append(m.node.Pods, p)
	c.podEvent(m, p)
	c.rankDue = true
}

// podEvent records that the pod arrived on or left the machine. A step stands for the time since
// the one before: the event is dated at a point of that interval drawn from the pod's UID and the
// step (deterministic), as a cluster whose controller stamps each event when it happens would date
// it. The dates decide when a machine is Consolidatable and whether it is still inside
// consolidateAfter (status.lastPodEventTime), so with steps as long as consolidateAfter some
// machines touched in a step are past their window at its round and others are not, as in a
// cluster.
func (c *Cluster) podEvent(m *machine, p *corev1.Pod) {
	at := c.now
	if step := uint64(c.cfg.Step); step > 0 {
		h := fnv.New64a()
		_, _ = h.Write([]byte(p.UID))
		_, _ = h.Write(strconv.AppendInt(nil, c.now.UnixNano(), 10))
		at = at.Add(-time.Duration(h.Sum64() % step))
	}
	if at.After(m.lastPodEvent) {
		m.lastPodEvent = at
	}
}

// schedule places pending pods: on ready machines with room (as the kube-scheduler), nominated to
// machines starting, or on new machines (as the provisioner), in one solve. Machines are offered
// in the kube-scheduler's order of preference: machines not planned for removal first (the
// planned ones carry a PreferNoSchedule taint), then the least allocated (its default
// LeastAllocated scoring spreads pods).
func (c *Cluster) schedule() {
	if len(c.pending) == 0 {
		return
	}
	in := solver.Input{Pods: c.pending, Nodes: slices.Clone(c.fixed.OtherNodes), DaemonSetPods: c.fixed.DaemonSetPods,
		NamespaceLabels: c.fixed.NamespaceLabels, WellKnownLabels: c.fixed.WellKnownLabels}
	for _, p := range c.pools {
		in.NodePools = append(in.NodePools, p.Solver)
	}
	byName := map[string]*machine{}
	order := slices.Clone(c.machines)
	free := make(map[*machine]float64, len(order))
	for _, m := range order {
		if alloc := m.node.NodeClaim.Status.Allocatable.Cpu().AsApproximateFloat64(); alloc > 0 {
			used := solver.Requests(append(slices.Clip(m.node.Pods), m.nominated...))
			free[m] = 1 - used.Cpu().AsApproximateFloat64()/alloc
		}
	}
	slices.SortStableFunc(order, func(a, b *machine) int {
		if a.planned != b.planned {
			if a.planned {
				return 1
			}
			return -1
		}
		return cmp.Compare(free[b], free[a])
	})
	for _, m := range order {
		if m.leaving {
			continue
		}
		en := solver.ExistingNode{Name: m.node.NodeClaim.Name, Labels: m.node.NodeClaim.Labels, Taints: m.node.NodeClaim.Spec.Taints,
			Allocatable: m.node.NodeClaim.Status.Allocatable, Pods: append(slices.Clip(m.node.Pods), m.nominated...)}
		if n := m.node.Node; n != nil {
			// A registered node's own name, labels, taints and allocatable are what the scheduler reads.
			en.Name, en.Labels, en.Taints, en.Allocatable = n.Name, n.Labels, n.Spec.Taints, n.Status.Allocatable
		}
		byName[en.Name] = m
		in.Nodes = append(in.Nodes, en)
	}
	opts := c.cfg.Disruption.Solver
	opts.FillLimits = true // as the provisioner plans
	plan := solver.Solve(in, opts)
	c.unschedulable = plan.Unschedulable
	placed := map[*corev1.Pod]bool{}
	for _, b := range plan.Bindings {
		m := byName[b.Node]
		if m == nil {
			// A node no pool manages: the pod runs there, outside the replay's machines.
			placed[b.Pod] = true
			continue
		}
		if m.node.Node != nil {
			c.bind(b.Pod, m)
		} else {
			m.nominated = append(m.nominated, b.Pod)
		}
		placed[b.Pod] = true
	}
	for _, nc := range plan.NodeClaims {
		m := c.launch(nc, "")
		m.nominated = append(m.nominated, nc.Pods...)
		for _, p := range nc.Pods {
			placed[p] = true
		}
	}
	c.pending = slices.DeleteFunc(c.pending, func(p *corev1.Pod) bool { return placed[p] })
}

// launch adds a machine of the plan's cheapest allowed offering, ready after the launch delay.
func (c *Cluster) launch(nc *solver.PlannedNodeClaim, replacementFor disruptionplan.Method) *machine {
	c.seq++
	pool := c.poolOf(nc.NodePool)
	name := fmt.Sprintf("%s-%d", pool.NodePool.Name, c.seq)
	it, o := cheapest(nc)
	labels := map[string]string{karpv1.NodePoolLabelKey: pool.NodePool.Name, karpv1.InstanceTypeLabelKey: it.Name,
		karpv1.ZoneLabelKey: o.Zone, karpv1.CapacityTypeLabelKey: o.CapacityType, corev1.LabelHostname: name}
	maps.Copy(labels, it.Requirements.Labels())
	labels[corev1.LabelHostname] = name
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(c.now)},
		Spec: karpv1.NodeClaimSpec{Taints: pool.NodePool.Spec.Template.Spec.Taints}}
	if replacementFor != "" {
		claim.Annotations = map[string]string{disruptionplan.ReplacementAnnotationKey: string(replacementFor)}
	}
	claim.Status.ProviderID = "replay://" + name
	claim.Status.NodeName = name
	claim.Status.Capacity, claim.Status.Allocatable = it.Capacity, it.Allocatable()
	claim.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched",
		LastTransitionTime: metav1.NewTime(c.now)}}
	m := &machine{node: &disruptionplan.Node{NodeClaim: claim}, price: o.Price + pool.Solver.NodeCost, readyAt: c.now.Add(c.cfg.LaunchDelay), lastPodEvent: c.now}
	c.machines = append(c.machines, m)
	c.report.Launched++
	return m
}

// cheapest is the plan's cheapest available offering its requirements allow.
func cheapest(nc *solver.PlannedNodeClaim) (*cloudprovider.InstanceType, cloudprovider.Offering) {
	zone, hasZone := nc.Requirements.Get(karpv1.ZoneLabelKey)
	ct, hasCT := nc.Requirements.Get(karpv1.CapacityTypeLabelKey)
	var bestIT *cloudprovider.InstanceType
	var best cloudprovider.Offering
	price := math.Inf(1)
	for _, it := range nc.InstanceTypes {
		for _, o := range it.Offerings {
			if !o.Available || hasZone && !zone.Allows(o.Zone) || hasCT && !ct.Allows(o.CapacityType) {
				continue
			}
			if o.Price < price {
				bestIT, best, price = it, o, o.Price
			}
		}
	}
	return bestIT, best
}

// RemoveRandom deletes each running pod with probability fraction (seeded): the scale-downs
// that leave a packed cluster fragmented. The deployments keep their replica functions; callers
// that go on stepping should lower them too.
func (c *Cluster) RemoveRandom(fraction float64, rng interface{ Float64() float64 }) int {
	removed := 0
	for _, name := range slices.Sorted(maps.Keys(c.byDep)) {
		pods := c.byDep[name]
		kept := pods[:0]
		for _, p := range pods {
			if p.Spec.NodeName != "" && rng.Float64() < fraction {
				c.remove(p)
				removed++
				continue
			}
			kept = append(kept, p)
		}
		c.byDep[name] = kept
	}
	return removed
}

// Pods are the running pods.
func (c *Cluster) Pods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, m := range c.machines {
		out = append(out, m.node.Pods...)
	}
	return out
}

// Apply carries out a command at once (replacements ready immediately), for benchmarks that
// measure one round's effect.
func (c *Cluster) Apply(cmd *disruptionplan.Command) {
	e := &execution{cmd: cmd}
	for _, r := range cmd.Replacements {
		m := c.launch(r, cmd.Method)
		m.readyAt = c.now
		e.replacements = append(e.replacements, m)
	}
	c.bringUp()
	c.finish(e)
	c.schedule()
	c.bringUp()
}

// Machine is one machine of the replayed cluster, as a report lists it.
type Machine struct {
	// Name is the node's name (the NodeClaim's while it has none).
	Name                                       string
	NodePool, InstanceType, CapacityType, Zone string
	// Price is its hourly price, with its pool's per-node cost.
	Price float64
}

// Machines are the cluster's machines now, in name order.
func (c *Cluster) Machines() []Machine {
	out := make([]Machine, 0, len(c.machines))
	for _, m := range c.machines {
		l := m.node.NodeClaim.Labels
		out = append(out, Machine{Name: m.node.Name(), NodePool: l[karpv1.NodePoolLabelKey], InstanceType: l[karpv1.InstanceTypeLabelKey],
			CapacityType: l[karpv1.CapacityTypeLabelKey], Zone: l[karpv1.ZoneLabelKey], Price: m.price})
	}
	slices.SortFunc(out, func(a, b Machine) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// Pending are the pods not placed: waiting for room or for a machine to come up.
func (c *Cluster) Pending() int { return len(c.pending) + c.nominatedCount() }

// Unschedulable are the solver's answers for the pods the last solve could place nowhere.
func (c *Cluster) Unschedulable() []solver.PodError { return c.unschedulable }

// Quiet reports whether nothing is under way: no pod waits for a machine coming up, and no
// disruption command is decided or being carried out. Pods no machine can hold may still pend.
func (c *Cluster) Quiet() bool {
	if c.decided != nil || c.executing != nil || c.nominatedCount() > 0 {
		return false
	}
	for _, m := range c.machines {
		if m.node.Node == nil {
			return false
		}
	}
	return true
}
