package provisioning

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/bufferstore"
	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/crashpoint"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/planning"
	podutil "capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/provreq"
	"capstan.dev/capstan/internal/solver"
)

// Provisioner plans and creates NodeClaims for pending pods.
type Provisioner struct {
	Client client.Client
	// APIReader reads from the API server, not the cache: after a create whose answer was lost
	// it says whether the claim exists (claimstore.Create). Nil reads through Client.
	APIReader client.Reader
	Cloud     cloudprovider.CloudProvider
	Clock     clock.Clock
	Recorder  events.EventRecorder
	// BatchIdle ends a batch when no new pod arrived for this long (default 1s); BatchMax bounds
	// a batch (default 10s).
	BatchIdle, BatchMax time.Duration
	// Metrics may be nil.
	Metrics *metrics.Metrics
	// SolverOptions are the preference and minValues policies.
	SolverOptions solver.Options
	// NodeCost is the per-node cost (US dollars per hour) of pools without the
	// nodepools.NodeCostAnnotationKey annotation.
	NodeCost float64
	// SpendingLimit is the cluster's spending limit in dollars per hour (0: none): the claims of
	// every pool together may cost at most that much.
	SpendingLimit float64
	// CreateConcurrency bounds the NodeClaims a pass creates at once (DefaultCreateConcurrency
	// when zero). On a busy API server each create takes about half a second whatever else is in
	// flight, so a burst's claims come as fast as this many at a time allow: 1,000 claims took 26 s
	// 32 at a time and 10 s 96 at a time on the local cluster. The client's rate limit still bounds
	// the rate.
	CreateConcurrency int
	// Buffers are the virtual pods of the CapacityBuffers whose room is kept (nil: none).
	Buffers func(context.Context) ([]*corev1.Pod, error)
	// DefaultSpread gives pending pods the cluster's default topology spread constraints
	// (SCHEDULER_CONFIG), as the kube-scheduler will; nil gives none.
	DefaultSpread *defaultspread.Applier
	// Recheck is how soon a pass that left pods unplaced is followed by another when nothing
	// else triggers one (DefaultRecheck when zero).
	Recheck time.Duration

	trigger chan struct{}
	// passes counts the passes started; a recheck is dropped when another pass started since it
	// was set.
	passes int
	// opened is when the batch being gathered got its first trigger (zero: none since the last
	// pass started); a pass that runs long leaves the next batch already open that long.
	mu     sync.Mutex
	opened time.Time
	// created remembers the NodeClaims this provisioner created until the (cached) client lists
	// them, so that a pass right after another does not plan the same pods twice; gone are the
	// claims seen deleted (Forget), which are not remembered however late their create is
	// recorded. createdMu guards both against Forget's callers.
	createdMu sync.Mutex
	created   map[string]createdClaim
	gone      map[string]time.Time
	// passMu makes passes and Exclusive's callers plan one at a time.
	passMu sync.Mutex
	// nominated remembers the in-flight claim each pending pod was planned onto; nominatedMu
	// guards it against PodsNominatedTo's readers.
	nominatedMu sync.Mutex
	nominated   nominations
	// leavingOnto remembers, per pod of a node going away, the claim a pass planned it onto (new
	// or in flight) while the pod is still leaving; goingSeen are the nodes going away the last
	// pass saw. nominatedMu guards both against LaunchedFor's readers (the termination's drain,
	// which waits for these claims).
	leavingOnto map[types.UID]string
	goingSeen   map[string]bool
	// nominatedEvents bounds the Nominated events on pods (see nominatedEventsPerSecond).
	nominatedEvents flowcontrol.PassiveRateLimiter
	// unschedulable is what the last pass said of each pod it could not place, so that a pod's
	// log line is written when its answer changes, not on every pass.
	unschedulable map[types.UID]string
	// missed remembers, per pending pod, the claims bought for it whose nodes came up while it
	// stayed pending (the runaway guard, missed.go).
	missed map[types.UID]missedClaims
	// seenPending remembers when each pod was last seen pending (pruned after seenPendingFor): a
	// machine whose room went to such pods lost it to the scheduler's choice among pods Capstan
	// planned too, which is no miss for the runaway guard.
	seenPending map[types.UID]time.Time
}

// Nominated events on pods are bounded: one event per pod is the API server's largest write load
// in a burst (5,000 pods, 5,000 writes competing with the NodeClaims' creation), and an event is
// a courtesy, not state. A pass of up to nominatedEventBurst pods still tells every pod; a burst
// tells its first pods and then nominatedEventsPerSecond. Karpenter bounds the same event (5/s,
// burst 10); the "created nodeclaim" log line names every claim's pod count either way.
const (
	nominatedEventsPerSecond = 10
	nominatedEventBurst      = 100
)

type createdClaim struct {
	nc *karpv1.NodeClaim
	at time.Time
}

// createdTTL bounds how long a created NodeClaim is remembered without the client listing it.
const createdTTL = time.Minute

// remember records a NodeClaim just created, unless it was seen deleted already.
func (p *Provisioner) remember(nc *karpv1.NodeClaim) {
	p.createdMu.Lock()
	defer p.createdMu.Unlock()
	if _, ok := p.gone[nc.Name]; ok {
		return
	}
	if p.created == nil {
		p.created = map[string]createdClaim{}
	}
	p.created[nc.Name] = createdClaim{nc: nc.DeepCopy(), at: p.Clock.Now()}
}

// Forget drops a NodeClaim that is being deleted or is gone from the claims remembered as
// created. A claim whose launch failed at once (insufficient capacity) is deleted within
// milliseconds, often before the cache lists it: remembered, it would stand in flight for
// createdTTL with its pods waiting on it, and no event would start a pass after that.
func (p *Provisioner) Forget(name string) {
	p.createdMu.Lock()
	defer p.createdMu.Unlock()
	delete(p.created, name)
	if p.gone == nil {
		p.gone = map[string]time.Time{}
	}
	p.gone[name] = p.Clock.Now()
}

// withCreated adds to listed the NodeClaims created here that the client does not list yet, and
// forgets those it lists (or that are too old to be lagging).
func (p *Provisioner) withCreated(listed []karpv1.NodeClaim) []karpv1.NodeClaim {
	p.createdMu.Lock()
	defer p.createdMu.Unlock()
	seen := make(map[string]bool, len(listed))
	for i := range listed {
		seen[listed[i].Name] = true
	}
	for name, c := range p.created {
		switch {
		case seen[name] || p.Clock.Since(c.at) > createdTTL:
			delete(p.created, name)
		default:
			listed = append(listed, *c.nc)
		}
	}
	for name, at := range p.gone {
		if p.Clock.Since(at) > createdTTL {
			delete(p.gone, name)
		}
	}
	return listed
}

// create creates a planned claim under a name of its own (claimstore.Create settles a lost
// answer by that name), choosing another name when the random one is taken.
func (p *Provisioner) create(ctx context.Context, np *karpv1.NodePool, nc *karpv1.NodeClaim) error {
	reader := p.APIReader
	if reader == nil {
		reader = p.Client
	}
	var err error
	for range createNameTries {
		nc.Name = claimstore.NewName(np.Name)
		if err = claimstore.Create(ctx, p.Client, reader, p.Clock, nc); !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return err
}

// createNameTries bounds the random names tried for one claim: a name is taken with a chance of
// the pool's claims over 27^5 (14 million), so a second try is rare and a fifth unheard of.
const createNameTries = 5

// Name is the provisioner's name and log key.
func (p *Provisioner) Name() string { return "provisioner" }

// Trigger asks for a provisioning pass; triggers during a batch extend it.
func (p *Provisioner) Trigger() {
	p.init()
	p.mu.Lock()
	if p.opened.IsZero() {
		p.opened = p.Clock.Now()
	}
	p.mu.Unlock()
	select {
	case p.trigger <- struct{}{}:
	default:
	}
}

func (p *Provisioner) init() {
	if p.trigger == nil {
		p.trigger = make(chan struct{}, 1)
	}
}

// PodsNominatedTo are the pending pods the provisioner planned onto the in-flight claim: the
// NodeClaim lifecycle controller tells them when the claim cannot launch.
func (p *Provisioner) PodsNominatedTo(claim string) []types.NamespacedName {
	p.nominatedMu.Lock()
	defer p.nominatedMu.Unlock()
	return p.nominated.to(claim)
}

// NeedLeaderElection makes only the leader provision.
func (p *Provisioner) NeedLeaderElection() bool { return true }

// Start runs batches until ctx ends. It implements controller-runtime's Runnable.
func (p *Provisioner) Start(ctx context.Context) error {
	p.init()
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("controller", p.Name()))
	idle, maxWait := p.BatchIdle, p.BatchMax
	if idle == 0 {
		idle = time.Second
	}
	if maxWait == 0 {
		maxWait = 10 * time.Second
	}
	recheck := p.Recheck
	if recheck == 0 {
		recheck = DefaultRecheck
	}
	retry := newRetryBackoff()
	for {
		if !p.nextBatch(ctx, idle, maxWait) {
			return nil
		}
		p.mu.Lock()
		p.passes++
		pass := p.passes
		p.mu.Unlock()
		res, err := p.Provision(ctx)
		// A buffer's room may be taken by pods the scheduler binds without Capstan seeing a
		// pending pod: while buffers are kept, passes recur.
		// Pods may wait on claims created here that the client does not list yet: if one of them
		// is gone without an event seen, a later pass must plan its pods again.
		if err == nil && (res.Plan != nil && len(res.Plan.Unschedulable) > 0 || res.Buffered > 0 || res.Lagging > 0) {
			go func() {
				select {
				case <-ctx.Done():
				case <-p.Clock.After(recheck):
					p.mu.Lock()
					again := p.passes == pass
					p.mu.Unlock()
					if again {
						p.Trigger()
					}
				}
			}()
		}
		if err != nil {
			// Try again after a pause, as if a pod had arrived; the pause doubles with each pass
			// that fails in a row (an API server or cloud in trouble is not asked every 5 s).
			delay := retry.Step()
			log.FromContext(ctx).Error(err, "provisioning", "retry-in", delay.String())
			go func() {
				select {
				case <-ctx.Done():
				case <-p.Clock.After(delay):
					p.Trigger()
				}
			}()
			continue
		}
		retry = newRetryBackoff()
	}
}

// DefaultRecheck is how soon a pass that left pods unplaced is followed by another when no pod,
// NodeClaim or NodePool change triggers one first. What kept them out may change without an
// event the provisioner watches: a NodeClass status its cache had not seen yet, an offering back
// from a capacity error, a NodePool's limit freed by a node not yet deleted. Karpenter re-examines
// pending pods as often (every 10 s). A pass whose pods all have a place sets no recheck.
const DefaultRecheck = 10 * time.Second

// Retries of a failed pass: RetryAfterFailure, doubling with each failure in a row up to
// MaxRetryAfterFailure.
const (
	RetryAfterFailure    = 5 * time.Second
	MaxRetryAfterFailure = 2 * time.Minute
)

// newRetryBackoff is the pauses before retries of failed passes in a row.
func newRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: RetryAfterFailure, Factor: 2, Cap: MaxRetryAfterFailure, Steps: math.MaxInt32}
}

// nextBatch waits for a trigger, then for its batch to settle: until idle passes without another
// trigger, or maxWait has passed since the batch's first trigger. That trigger may have come while
// the previous pass ran (a burst keeps pods arriving while claims are created); its pods have
// waited already, so a pass that took longer than maxWait is followed at once. It returns false
// when ctx ends, and marks the batch taken: triggers from then on open the next one.
func (p *Provisioner) nextBatch(ctx context.Context, idle, maxWait time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-p.trigger:
	}
	p.mu.Lock()
	if p.opened.IsZero() {
		p.opened = p.Clock.Now()
	}
	left := maxWait - p.Clock.Since(p.opened)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.opened = time.Time{}
		p.mu.Unlock()
	}()
	if left <= 0 {
		return true
	}
	deadline := p.Clock.After(left)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-p.trigger:
		case <-p.Clock.After(idle):
			return true
		case <-deadline:
			return true
		}
	}
}

// DefaultCreateConcurrency is how many NodeClaims a pass creates at once unless set: the client's
// default rate (200 writes/s) over a loaded API server's half-second answers.
const DefaultCreateConcurrency = 100

// Result is what one pass did.
type Result struct {
	// Buffered counts the CapacityBuffers' virtual pods planned.
	Buffered int
	// Created are the NodeClaims created.
	Created []*karpv1.NodeClaim
	// Plan is the solver's plan.
	Plan *solver.Result
	// Lagging counts the NodeClaims created here that the pass counted in flight though the
	// client did not list them yet.
	Lagging int
}

// Provision runs one pass over the pending pods.
func (p *Provisioner) Provision(ctx context.Context) (*Result, error) {
	p.passMu.Lock()
	defer p.passMu.Unlock()
	logger := log.FromContext(ctx)
	in, said, err := p.pendingPods(ctx)
	if said != nil {
		defer func() { p.unschedulable = said }()
	}
	if err != nil {
		return nil, err
	}
	// Once the pass has planned them (or failed to): a drain asking before that waits.
	defer p.noteLeaving(in.going, in.leaving)
	if len(in.pending) == 0 {
		return &Result{Buffered: len(in.virtual)}, nil
	}
	st, booked, lagging, err := p.readState(ctx, in.bound)
	if err != nil {
		return nil, err
	}
	in.pending = withoutConsumers(in.pending, booked)
	if st.SpendingLeft != nil {
		p.Metrics.ClusterSpending(p.SpendingLimit, *st.SpendingLeft)
	}
	p.nominatedMu.Lock()
	if p.nominated == nil {
		p.nominated = nominations{}
	}
	pending, waiting, cameUp := p.nominated.split(in.pending, st.InFlight, st.Registered)
	p.nominatedMu.Unlock()
	for uid := range cameUp {
		if in.leaving[uid] {
			// Still running on its old node: the kube-scheduler has not had it to bind, nothing
			// was missed.
			delete(cameUp, uid)
		}
	}
	p.notePending(in.pending, in.leaving)
	pending, missed := p.guard(ctx, pending, st, cameUp, said)
	outcomes := bufferOutcomes(in.virtual, waiting)
	defer func() {
		if len(outcomes) > 0 {
			if err := bufferstore.WriteProvisioning(ctx, p.Client, metav1.NewTime(p.Clock.Now()), outcomes); err != nil {
				logger.Error(err, "writing capacitybuffers' Provisioning condition")
			}
		}
	}()
	for claim, pods := range waiting {
		en := &st.Nodes[st.InFlight[claim]]
		en.Pods = append(slices.Clip(en.Pods), pods...)
	}
	if len(pending) == 0 {
		return &Result{Buffered: len(in.virtual), Lagging: lagging}, nil
	}
	logger.Info("found provisionable pod(s)", "Pods", planning.PodList(pending), "duration", "0s")
	if err := p.limitAttachments(ctx, in.vols, st.Nodes); err != nil {
		return nil, err
	}
	start := time.Now()
	plan := p.solve(ctx, st, in.vols, pending, missed, said)
	res := &Result{Plan: plan, Buffered: len(in.virtual), Lagging: lagging}
	countPlaced(outcomes, plan)
	if len(plan.NodeClaims) > 0 {
		placed := 0
		for _, nc := range plan.NodeClaims {
			placed += len(nc.Pods)
		}
		logger.Info("computed new nodeclaim(s) to fit pod(s)", "nodeclaims", len(plan.NodeClaims), "pods", placed,
			"duration", time.Since(start).String())
	}
	made, unresolved, errs := p.createClaims(ctx, st, plan)
	res.Created = p.recordCreated(ctx, st, plan, made, unresolved, missed, in.leaving)
	if len(plan.NodeClaims) > 0 {
		// One line per pass with the counts: in a burst the per-claim lines are sampled away.
		failed, pods := 0, 0
		for i, err := range errs {
			if err != nil || unresolved[i] {
				failed++
			} else {
				pods += len(plan.NodeClaims[i].Pods)
			}
		}
		logger.Info("created nodeclaims", "created", len(res.Created), "failed", failed, "pods", pods,
			"duration", time.Since(start).String())
	}
	// Pods that fit nowhere are told so whether or not every create succeeded: a failed create
	// is retried, their answer does not depend on it.
	p.tellUnschedulable(ctx, plan.Unschedulable, said, in.leaving)
	return res, errors.Join(errs...)
}

// readState reads the state a pass plans on (the claims created here and not listed yet
// included), the claims booked for ProvisioningRequests taking no pod of the pass: their room is
// kept for the requests' pods. It returns the requests booked, and how many claims the client did
// not list yet.
func (p *Provisioner) readState(ctx context.Context, bound map[string][]*corev1.Pod) (*planning.State, map[types.NamespacedName]int, int, error) {
	var claims []karpv1.NodeClaim
	lagging := 0
	st, err := planning.ReadState(ctx, p.Client, p.Cloud, planning.Settings{NodeCost: p.NodeCost, SpendingLimit: p.SpendingLimit}, bound,
		func(listed []karpv1.NodeClaim) []karpv1.NodeClaim {
			claims = p.withCreated(listed)
			lagging = len(claims) - len(listed)
			return claims
		})
	if err != nil {
		return nil, nil, 0, err
	}
	return st, planning.Booked(st, claims, p.Clock.Now()), lagging, nil
}

// withoutConsumers leaves out the pods that consume a booked ProvisioningRequest: they wait for
// its machines, which the kube-scheduler binds them to.
func withoutConsumers(pending []*corev1.Pod, booked map[types.NamespacedName]int) []*corev1.Pod {
	if len(booked) == 0 {
		return pending
	}
	out := pending[:0:0]
	for _, pod := range pending {
		if req, ok := provreq.Consumes(pod); ok && booked[req] > 0 {
			continue
		}
		out = append(out, pod)
	}
	return out
}

// Exclusive runs fn while no pass runs, with the state a pass would read now; the claims fn
// creates must be given to remember, so that the next pass counts them even before its cache
// lists them. The ProvisioningRequests' controller buys through it: two planners reading the
// same limits at once could together exceed them.
func (p *Provisioner) Exclusive(ctx context.Context, fn func(st *planning.State, remember func(*karpv1.NodeClaim)) error) error {
	p.passMu.Lock()
	defer p.passMu.Unlock()
	pods := &corev1.PodList{}
	if err := p.Client.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	_, bound := planning.SplitPods(pods.Items)
	st, _, _, err := p.readState(ctx, bound)
	if err != nil {
		return err
	}
	return fn(st, p.remember)
}

// passInput is what a pass plans for: the pods waiting for a machine (the CapacityBuffers'
// virtual ones among them), the pods bound to each node, and the volumes the pending pods use.
type passInput struct {
	pending, virtual []*corev1.Pod
	bound            map[string][]*corev1.Pod
	vols             *volumes
	// leaving are the pods of nodes going away, planned with the pending ones
	// (planning.Going.TakeLeaving); they are among pending too, after the real pending pods.
	// going are those nodes, by name.
	leaving map[types.UID]bool
	going   map[string]bool
}

// pendingPods reads the pods a pass plans for. Pods with DRA requests are left to the
// kube-scheduler and told so; what was told is in the map it returns (nil when the pods could
// not be listed), which becomes the pass's record of what pods were told.
func (p *Provisioner) pendingPods(ctx context.Context) (passInput, map[types.UID]string, error) {
	logger := log.FromContext(ctx)
	pods := &corev1.PodList{}
	// Read-only (the pass and the solver only read pods, the solver's packings concurrently):
	// the cache's own objects, not a copy of every pod of the cluster on every pass.
	if err := p.Client.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
		return passInput{}, nil, fmt.Errorf("listing pods: %w", err)
	}
	var in passInput
	in.pending, in.bound = planning.SplitPods(pods.Items)
	leaving, going, err := p.leavingPods(ctx, in.bound)
	if err != nil {
		return passInput{}, nil, err
	}
	in.going = going
	if p.Buffers != nil {
		var err error
		if in.virtual, err = p.Buffers(ctx); err != nil {
			return passInput{}, nil, err
		}
		in.pending = append(in.pending, in.virtual...)
	}
	pending, dra := splitDRA(in.pending)
	// A leaving pod with DRA requests is the kube-scheduler's too once it is back, pending; while
	// it runs there is nothing to tell it.
	leaving, _ = splitDRA(leaving)
	said := make(map[types.UID]string, len(dra))
	for _, pod := range dra {
		// Left to the kube-scheduler: Capstan does not simulate DRA devices (Karpenter v1.15 with
		// its default IGNORE_DRA_REQUESTS=true does the same).
		if capacitybuffer.IsVirtual(pod) {
			continue
		}
		p.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", eventkey.Action("Schedule", DRAMessage), "%s", DRAMessage)
		said[pod.UID] = DRAMessage
		if p.unschedulable[pod.UID] != DRAMessage {
			logger.Info("skipping pod with Dynamic Resource Allocation requirements", "Pod", klog.KObj(pod))
		}
	}
	if len(leaving) > 0 {
		in.leaving = make(map[types.UID]bool, len(leaving))
		for _, pod := range leaving {
			in.leaving[pod.UID] = true
		}
		pending = append(pending, leaving...)
	}
	pending = p.DefaultSpread.Apply(ctx, pending)
	pending, vols, err := p.withVolumes(ctx, pending)
	if err != nil {
		return passInput{}, said, err
	}
	// Oldest first, the pods of nodes going away after the pending ones, a CapacityBuffer's
	// virtual pods after every real one: when limits cannot hold every pod, the solver takes the
	// pods in this order.
	rank := func(pod *corev1.Pod) int {
		switch {
		case capacitybuffer.IsVirtual(pod):
			return 2
		case in.leaving[pod.UID]:
			return 1
		}
		return 0
	}
	sort.Slice(pending, func(i, j int) bool {
		a, b := pending[i], pending[j]
		if ra, rb := rank(a), rank(b); ra != rb {
			return ra < rb
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Namespace+"/"+a.Name < b.Namespace+"/"+b.Name
	})
	in.pending, in.vols = pending, vols
	return in, said, nil
}

// leavingPods takes the pods of nodes going away out of bound and returns them
// (planning.Going.TakeLeaving). The cache's own Nodes and NodeClaims are read, not copied: a pass
// reads them again for its state only when it has pods to plan.
func (p *Provisioner) leavingPods(ctx context.Context, bound map[string][]*corev1.Pod) ([]*corev1.Pod, map[string]bool, error) {
	ncs := &karpv1.NodeClaimList{}
	if err := p.Client.List(ctx, ncs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := p.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing nodes: %w", err)
	}
	going := planning.GoingAway(nodes.Items, ncs.Items)
	return going.TakeLeaving(bound), going.Nodes, nil
}

// solve plans the pending pods; the pods the runaway guard holds back are planned without.
func (p *Provisioner) solve(ctx context.Context, st *planning.State, vols *volumes, pending []*corev1.Pod, missed map[types.UID][]string, said map[types.UID]string) *solver.Result {
	in := solver.Input{Pods: pending, NodePools: st.Pools, Nodes: st.Nodes, DaemonSetPods: st.DaemonSetPods, WellKnownLabels: p.Cloud.WellKnownLabels(),
		SpendingLeft: st.SpendingLeft}
	if vols != nil {
		in.Attachments = vols.attachments
	}
	start := time.Now()
	opts := p.SolverOptions
	opts.FillLimits = true
	plan := solver.Solve(in, opts)
	if rest := p.heldFrom(ctx, plan, pending, st, missed, said); rest != nil {
		// Pods held by the runaway guard: the plan without them.
		pending, in.Pods = rest, rest
		plan = solver.Solve(in, opts)
	}
	p.Metrics.Scheduled(p.Name(), time.Since(start).Seconds(), len(pending), len(plan.Unschedulable))
	return plan
}

// createClaims creates the plan's NodeClaims, concurrently: on a busy API server one at a time
// takes seconds per fifty, and the next pass waits for this one. A claim whose create may or may
// not have happened (unresolved) is returned as made too: its pods wait for it as for a made one
// (nominated, and the claim remembered until the cache lists it or createdTTL passes), but it is
// not counted or told as created.
func (p *Provisioner) createClaims(ctx context.Context, st *planning.State, plan *solver.Result) (made []*karpv1.NodeClaim, unresolved []bool, errs []error) {
	made = make([]*karpv1.NodeClaim, len(plan.NodeClaims))
	errs = make([]error, len(plan.NodeClaims))
	unresolved = make([]bool, len(plan.NodeClaims))
	workers := p.CreateConcurrency
	if workers <= 0 {
		workers = DefaultCreateConcurrency
	}
	sem := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for i, planned := range plan.NodeClaims {
		np := st.ByName[planned.NodePool]
		nc := planning.NewNodeClaim(np, planned)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			err := p.create(ctx, np, nc)
			if err != nil {
				errs[i] = fmt.Errorf("creating nodeclaim for NodePool %s: %w", np.Name, err)
				if !claimstore.IsUnresolved(err) {
					return
				}
				unresolved[i] = true
			}
			made[i] = nc
		}()
	}
	wg.Wait()
	crashpoint.Hit(crashpoint.ClaimsCreated)
	p.nominatedMu.Lock()
	p.nominated.nominate(plan, made)
	p.nominatedMu.Unlock()
	return made, unresolved, errs
}

// noteLeaving records, at the end of a pass, the nodes it saw going away and the claims it
// planned their pods onto (the nominations: new claims, or in-flight ones); a claim recorded
// before is kept after its node registers (its nomination ends then). Pods no longer leaving are
// forgotten.
func (p *Provisioner) noteLeaving(going map[string]bool, leaving map[types.UID]bool) {
	p.nominatedMu.Lock()
	defer p.nominatedMu.Unlock()
	p.goingSeen = going
	if p.leavingOnto == nil {
		p.leavingOnto = map[types.UID]string{}
	}
	for uid := range p.leavingOnto {
		if !leaving[uid] {
			delete(p.leavingOnto, uid)
		}
	}
	for uid := range leaving {
		if nom, ok := p.nominated[uid]; ok {
			p.leavingOnto[uid] = nom.claim
		}
	}
}

// LaunchedFor are the NodeClaims provisioning planned the pods of the node going away onto
// (launched for them, or in flight with room for them), each once; planned says whether a pass
// has seen the node going away yet (until then, nothing is launched for its pods).
func (p *Provisioner) LaunchedFor(node string, pods []types.UID) (claims []string, planned bool) {
	p.nominatedMu.Lock()
	defer p.nominatedMu.Unlock()
	if !p.goingSeen[node] {
		return nil, false
	}
	var out []string
	for _, uid := range pods {
		if c := p.leavingOnto[uid]; c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, true
}

// recordCreated remembers the made claims, and counts, logs and tells their pods of the created
// ones, which it returns.
func (p *Provisioner) recordCreated(ctx context.Context, st *planning.State, plan *solver.Result, made []*karpv1.NodeClaim, unresolved []bool,
	missed map[types.UID][]string, leaving map[types.UID]bool) []*karpv1.NodeClaim {
	var created []*karpv1.NodeClaim
	for i, nc := range made {
		if nc == nil {
			continue
		}
		p.remember(nc)
		if unresolved[i] {
			continue
		}
		planned, np := plan.NodeClaims[i], st.ByName[plan.NodeClaims[i].NodePool]
		created = append(created, nc)
		p.Metrics.Created(np.Name, metrics.ReasonProvisioned, planned.MinValuesRelaxed)
		log.FromContext(ctx).Info("created nodeclaim", "NodePool", klog.KObj(np), "NodeClaim", klog.KObj(nc),
			"requests", describe(planned.Requests), "instance-types", planning.TypeList(planned.InstanceTypes), "pods", len(planned.Pods))
		p.nominatedEvent(planned.Pods, nc.Name, leaving)
		for _, pod := range planned.Pods {
			if claims := missed[pod.UID]; claims != nil {
				// Another machine for a pod whose first came up without it: the count survives a
				// restart.
				p.recordMissed(ctx, pod, st.Inputs, claims)
			}
		}
	}
	return created
}

// tellUnschedulable tells each pending pod that fits nowhere why, in an event each pass and a
// log line when the reason changed. A pod of a node going away (leaving) is told nothing while it
// runs: once evicted it comes back pending, and is told then.
func (p *Provisioner) tellUnschedulable(ctx context.Context, unschedulable []solver.PodError, said map[types.UID]string, leaving map[types.UID]bool) {
	logger := log.FromContext(ctx)
	for _, u := range unschedulable {
		msg := UnschedulableMessage(u)
		if capacitybuffer.IsVirtual(u.Pod) || leaving[u.Pod.UID] {
			continue
		}
		p.Recorder.Eventf(u.Pod, nil, corev1.EventTypeWarning, "FailedScheduling", eventkey.Action("Schedule", msg), "%s", msg)
		said[u.Pod.UID] = msg
		if p.unschedulable[u.Pod.UID] == msg {
			continue
		}
		if c, ok := u.Closest(); ok {
			logger.Info("could not schedule pod", "Pod", klog.KObj(u.Pod), "NodePool", c.NodePool, "reason", c.Reason,
				"nodepools", len(u.Pools))
		} else {
			logger.Info("could not schedule pod", "Pod", klog.KObj(u.Pod), "reason", u.Reason)
		}
		logger.V(1).Info("could not schedule pod: every NodePool", "Pod", klog.KObj(u.Pod), "reason", u.Reason)
	}
}

// bufferOutcomes starts each buffer's count with its chunks waiting for machines being launched.
func bufferOutcomes(virtual []*corev1.Pod, waiting map[string][]*corev1.Pod) map[types.NamespacedName]capacitybuffer.Outcome {
	if len(virtual) == 0 {
		return nil
	}
	out := map[types.NamespacedName]capacitybuffer.Outcome{}
	for _, p := range virtual {
		out[capacitybuffer.Key(p)] = capacitybuffer.Outcome{}
	}
	for _, pods := range waiting {
		for _, p := range pods {
			if capacitybuffer.IsVirtual(p) {
				o := out[capacitybuffer.Key(p)]
				o.New++
				out[capacitybuffer.Key(p)] = o
			}
		}
	}
	return out
}

// countPlaced adds where the plan put the buffers' chunks.
func countPlaced(outcomes map[types.NamespacedName]capacitybuffer.Outcome, plan *solver.Result) {
	if len(outcomes) == 0 {
		return
	}
	add := func(p *corev1.Pod, f func(*capacitybuffer.Outcome)) {
		if capacitybuffer.IsVirtual(p) {
			o := outcomes[capacitybuffer.Key(p)]
			f(&o)
			outcomes[capacitybuffer.Key(p)] = o
		}
	}
	for _, b := range plan.Bindings {
		add(b.Pod, func(o *capacitybuffer.Outcome) {
			if strings.HasPrefix(b.Node, nodeclaims.InFlightPrefix) {
				o.New++
			} else {
				o.Existing++
			}
		})
	}
	for _, nc := range plan.NodeClaims {
		for _, p := range nc.Pods {
			add(p, func(o *capacitybuffer.Outcome) { o.New++ })
		}
	}
	for _, u := range plan.Unschedulable {
		add(u.Pod, func(o *capacitybuffer.Outcome) {
			o.Unplaced++
			if o.Why == "" {
				o.Why = UnschedulableMessage(u)
			}
		})
	}
}

// DRAMessage is the FailedScheduling message of a pod with Dynamic Resource Allocation
// requirements.
const DRAMessage = "Pod has Dynamic Resource Allocation requirements, which Capstan does not plan for (as Karpenter with IGNORE_DRA_REQUESTS=true): the kube-scheduler places it on nodes whose devices fit"

// splitDRA separates the pods with DRA requirements from the others.
func splitDRA(pending []*corev1.Pod) (rest, dra []*corev1.Pod) {
	for _, p := range pending {
		if podutil.HasDRARequirements(p) {
			dra = append(dra, p)
		} else {
			rest = append(rest, p)
		}
	}
	return rest, dra
}

// UnschedulableMessage is the FailedScheduling event's message for a pod the solver could not
// place: the closest NodePool (the one the pod got furthest with) and its one reason first, then
// the other NodePools, closest first, as many as fit in an event.
func UnschedulableMessage(u solver.PodError) string {
	c, ok := u.Closest()
	if !ok {
		return eventkey.Clip("Failed to schedule pod, " + u.Reason)
	}
	msg := fmt.Sprintf("Failed to schedule pod, closest NodePool %s: %s", c.NodePool, c.Reason)
	others := u.Ranked()[1:]
	if len(others) == 0 {
		return msg
	}
	msg += "; other NodePools:"
	for i, m := range others {
		part := fmt.Sprintf(" %s: %s;", m.NodePool, m.Reason)
		more := ""
		if i < len(others)-1 {
			more = fmt.Sprintf(" and %d more", len(others)-i-1)
		}
		if len(msg)+len(part)+len(more) > eventkey.MaxNote {
			return eventkey.Clip(strings.TrimSuffix(msg, ";") + fmt.Sprintf(" and %d more", len(others)-i))
		}
		msg += part
	}
	return eventkey.Clip(strings.TrimSuffix(msg, ";"))
}

// nominatedEvent tells each pod, within the events' budget, which claim it should schedule on; a
// pod of a node going away (leaving) is told that the claim is for when it leaves.
func (p *Provisioner) nominatedEvent(pods []*corev1.Pod, claim string, leaving map[types.UID]bool) {
	if p.nominatedEvents == nil {
		p.nominatedEvents = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(nominatedEventsPerSecond, nominatedEventBurst, p.Clock)
	}
	for _, pod := range pods {
		if capacitybuffer.IsVirtual(pod) {
			// A buffer's chunk is no object: nothing to tell.
			continue
		}
		if !p.nominatedEvents.TryAccept() {
			return
		}
		if leaving[pod.UID] {
			p.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Nominated", "Schedule",
				"Pod should schedule on: nodeclaim/%s once it leaves node %s, which is going away", claim, pod.Spec.NodeName)
			continue
		}
		p.Recorder.Eventf(pod, nil, corev1.EventTypeNormal, "Nominated", "Schedule", "Pod should schedule on: nodeclaim/%s", claim)
	}
}

func describe(rl corev1.ResourceList) string {
	keys := make([]string, 0, len(rl))
	for k := range rl {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		q := rl[corev1.ResourceName(k)]
		parts = append(parts, fmt.Sprintf("%q:%q", k, q.String()))
	}
	return "{" + strings.Join(parts, ",") + "}"
}
