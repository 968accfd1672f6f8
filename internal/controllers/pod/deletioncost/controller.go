// Package deletioncost writes controller.kubernetes.io/pod-deletion-cost on the ReplicaSet pods of
// Capstan's nodes (Karpenter's PodDeletionCostManagement gate), so that a Deployment's scale-in
// deletes pods where consolidation wants machines empty, and emptiness removes those machines
// without an eviction. The ranking is the decision core's (disruptionplan.DeletionCosts); this
// controller only carries it out, and takes its values back when the gate is off.
package deletioncost

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/pods"
)

// Defaults of the controller.
const (
	// DefaultPeriod is the time between passes: how stale a ranking may be when a scale-in comes.
	DefaultPeriod = 30 * time.Second
	// DefaultWritesPerSecond bounds the pod patches: a re-ranking of a large cluster must not take
	// the API client's whole rate (KUBE_CLIENT_QPS, 200 by default) from provisioning, and a
	// burst's pods must be ranked before a scale-in comes (BenchmarkTimeToRankABurst: 1,000 pods
	// bound over 18 s wait 17 s in the median and 32 s at most at 20 per second, 1.5 s and 3 s at
	// 100).
	DefaultWritesPerSecond = 100
	// DefaultDebounce is how long a pass waits after the first pod that woke it, gathering the
	// pods a burst binds meanwhile into one pass.
	DefaultDebounce = 2 * time.Second
)

// Controller ranks the nodes and patches the pods whose deletion cost differs from the ranking.
// Only the leader runs it.
type Controller struct {
	Client client.Client
	Clock  clock.Clock
	// Snapshot reads the cluster in the decision core's terms (the disruption controller's view).
	Snapshot func(context.Context) (*disruptionplan.Snapshot, error)
	// Decision are the decision core's options, for the ranking.
	Decision disruptionplan.Options
	// Enabled is the PodDeletionCostManagement gate; off, each pass removes Capstan's values.
	Enabled bool
	// Period is the time between passes (default DefaultPeriod); WritesPerSecond bounds the
	// patches (default DefaultWritesPerSecond, with a burst of as many).
	Period          time.Duration
	WritesPerSecond float64
	// Informers, when set, wakes the controller before its period: a ReplicaSet pod bound to a
	// node without a deletion cost, or a NodeClaim initializing, starts a pass after Debounce
	// (default DefaultDebounce). Without it, the pods a burst lands have no value for up to a
	// period, and a scale-in then deletes the older pods around them: a machine that should have
	// been emptied keeps those few.
	Informers Informers
	Debounce  time.Duration

	limiter *rate.Limiter
}

// Informers hands out shared informers; controller-runtime's cache is one.
type Informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...crcache.InformerGetOption) (crcache.Informer, error)
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "pod.deletioncost" }

// NeedLeaderElection makes only the leader write.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start runs passes until ctx ends. It implements controller-runtime's Runnable.
func (c *Controller) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("controller", c.Name()))
	period := cmp.Or(c.Period, DefaultPeriod)
	wake, err := c.watch(ctx)
	if err != nil {
		return err
	}
	for {
		if _, err := c.Sync(ctx); err != nil && ctx.Err() == nil {
			log.FromContext(ctx).Error(err, "writing pod deletion costs")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-c.Clock.After(period):
		case <-wake:
			select {
			case <-ctx.Done():
				return nil
			case <-c.Clock.After(cmp.Or(c.Debounce, DefaultDebounce)):
			}
		}
	}
}

// watch returns a channel that receives when a ReplicaSet pod without a deletion cost is bound to
// a node (or seen bound for the first time), or a NodeClaim initializes (nil, which never
// receives, without Informers). Sends never block: one pending wake-up stands for any number of
// events.
func (c *Controller) watch(ctx context.Context) (<-chan struct{}, error) {
	if c.Informers == nil {
		return nil, nil
	}
	inf, err := c.Informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	signal := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Spec.NodeName == "" || !pods.OwnedByReplicaSet(p) || pods.DeletionCostOf(p) != pods.DeletionCostUnset {
			return
		}
		poke()
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: signal,
		// Only the binding: later updates of a pod the ranking leaves out (kept nodes) would wake
		// a pass each; the period catches those.
		UpdateFunc: func(old, obj any) {
			if o, ok := old.(*corev1.Pod); ok && o.Spec.NodeName == "" {
				signal(obj)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching pods: %w", err)
	}
	// A node's pods are ranked once its claim has initialized: in a burst the kube-scheduler
	// binds pods to a node as soon as it is Ready, often before Capstan sees the claim
	// initialized, and the pass their binding woke leaves them out. The claim initializing wakes
	// the pass that ranks them (not the period, 30 s later).
	claims, err := c.Informers.GetInformer(ctx, &karpv1.NodeClaim{})
	if err != nil {
		return nil, fmt.Errorf("watching nodeclaims: %w", err)
	}
	if _, err := claims.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*karpv1.NodeClaim)
			n, ok2 := obj.(*karpv1.NodeClaim)
			if ok1 && ok2 && !meta.IsStatusConditionTrue(o.Status.Conditions, karpv1.ConditionTypeInitialized) &&
				meta.IsStatusConditionTrue(n.Status.Conditions, karpv1.ConditionTypeInitialized) {
				poke()
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("watching nodeclaims: %w", err)
	}
	return wake, nil
}

// write is one pod's patch: value is the deletion cost to set, or nil to remove Capstan's.
type write struct {
	pod   *corev1.Pod
	value *int32
	// dropRecord only removes Capstan's record: somebody changed the value since.
	dropRecord bool
}

// Sync makes one pass: it ranks the nodes (when enabled) and patches, at the bounded rate, the
// pods whose deletion cost is Capstan's or unset and differs from the ranking. A value somebody
// else set is never changed. It returns the patches made.
func (c *Controller) Sync(ctx context.Context) (int, error) {
	costs := map[string]int32{}
	if c.Enabled {
		snap, err := c.Snapshot(ctx)
		if err != nil {
			return 0, fmt.Errorf("reading the cluster: %w", err)
		}
		costs = disruptionplan.DeletionCosts(snap, c.Decision)
	}
	list := &corev1.PodList{}
	if err := c.Client.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return 0, fmt.Errorf("listing pods: %w", err)
	}
	writes := plan(list.Items, costs)
	if c.limiter == nil {
		qps := cmp.Or(c.WritesPerSecond, DefaultWritesPerSecond)
		c.limiter = rate.NewLimiter(rate.Limit(qps), max(1, int(qps)))
	}
	done := 0
	var errs []error
	for _, w := range writes {
		if err := c.wait(ctx); err != nil {
			return done, err
		}
		switch err := c.patch(ctx, w); {
		case err == nil:
			done++
		case apierrors.IsConflict(err) || apierrors.IsNotFound(err):
			// Changed or gone since the cache saw it: the next pass looks again.
		default:
			errs = append(errs, fmt.Errorf("patching pod %s/%s: %w", w.pod.Namespace, w.pod.Name, err))
		}
	}
	if done > 0 {
		log.FromContext(ctx).V(1).Info("wrote pod deletion costs", "patches", done, "ranked-nodes", len(costs))
	}
	return done, errors.Join(errs...)
}

// wait takes one write from the limiter, sleeping on the injected clock until it is due.
func (c *Controller) wait(ctx context.Context) error {
	now := c.Clock.Now()
	delay := c.limiter.ReserveN(now, 1).DelayFrom(now)
	if delay <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.Clock.After(delay):
		return nil
	}
}

// plan lists the patches that bring the pods to the ranking, most urgent first: the lowest values
// (the pods a scale-in should take first), then the removals.
func plan(items []corev1.Pod, costs map[string]int32) []write {
	var out []write
	for i := range items {
		p := &items[i]
		want, ranked := costs[p.Spec.NodeName]
		ranked = ranked && p.Spec.NodeName != "" && pods.OwnedByReplicaSet(p) && pods.Reschedulable(p)
		switch pods.DeletionCostOf(p) {
		case pods.DeletionCostUser:
		case pods.DeletionCostTaken:
			out = append(out, write{pod: p, dropRecord: true})
		case pods.DeletionCostUnset:
			if ranked {
				out = append(out, write{pod: p, value: &want})
			}
		case pods.DeletionCostCapstan:
			switch {
			case !ranked:
				out = append(out, write{pod: p})
			case p.Annotations[corev1.PodDeletionCost] != strconv.Itoa(int(want)):
				out = append(out, write{pod: p, value: &want})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b write) int {
		switch {
		case a.value == nil && b.value == nil:
			return 0
		case a.value == nil:
			return 1
		case b.value == nil:
			return -1
		}
		return cmp.Compare(*a.value, *b.value)
	})
	return out
}

// patch writes one pod's annotations with optimistic locking, so that a value set since the
// cache saw the pod is never overwritten.
func (c *Controller) patch(ctx context.Context, w write) error {
	stored := w.pod
	p := stored.DeepCopy()
	switch {
	case w.dropRecord:
		delete(p.Annotations, pods.DeletionCostRecordKey)
	case w.value == nil:
		pods.ClearDeletionCost(p)
	default:
		pods.SetDeletionCost(p, *w.value)
	}
	return c.Client.Patch(ctx, p, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{}))
}
