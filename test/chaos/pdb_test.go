package chaos

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/localcluster"
)

// budgeted is a Deployment guarded by a PodDisruptionBudget: minAvailable (a percentage) or
// maxUnavailable (a count).
type budgeted struct {
	app            string
	minAvailable   string
	maxUnavailable int
}

// floor is the fewest healthy pods the budget allows of replicas desired.
func (b budgeted) floor(replicas int) int {
	if b.minAvailable != "" {
		v := intstr.FromString(b.minAvailable)
		n, _ := intstr.GetScaledValueFromIntOrPercent(&v, replicas, true)
		return n
	}
	return replicas - b.maxUnavailable
}

// TestEvictionsUnderPDBs: two Deployments, one with a minAvailable PodDisruptionBudget and one
// with maxUnavailable, and a third without a budget, packed several pods to a machine; every
// node drifts (the pool's template changes) round after round, then the third Deployment is
// scaled to zero, which leaves every machine a third empty, and consolidation packs the budgeted
// pods onto fewer machines. A sampler reads every second how many of each Deployment's pods are healthy (Ready, not
// being deleted) and counts a violation whenever fewer are than the budget allows; a watch counts
// the pods evicted (the DisruptionTarget condition the Eviction API sets). Must hold: thousands of
// evictions (the full version ≥ 1,000), no violation, every pod Running at the end, nothing left
// tainted.
func TestEvictionsUnderPDBs(t *testing.T) {
	perApp := setting("PDB_PODS", 30, 170)
	rounds := setting("PDB_DRIFTS", 1, 2)
	const name = "pdb"
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.InstanceTypes = []string{"m5.2xlarge"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(5 * time.Second)
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "50%"}}
	})
	apps := []budgeted{{app: "pdb-min", minAvailable: "80%"}, {app: "pdb-max", maxUnavailable: max(3, perApp/10)}}
	const filler = "pdb-none"
	packedDeployment(t, filler, name, int32(perApp))
	for _, b := range apps {
		packedDeployment(t, b.app, name, int32(perApp))
		pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: b.app, Namespace: "default"},
			Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": b.app}}}}
		if b.minAvailable != "" {
			v := intstr.FromString(b.minAvailable)
			pdb.Spec.MinAvailable = &v
		} else {
			v := intstr.FromInt32(int32(b.maxUnavailable))
			pdb.Spec.MaxUnavailable = &v
		}
		if err := h.Client.Create(t.Context(), pdb); err != nil {
			t.Fatal(err)
		}
	}
	running := func(ctx context.Context) (bool, error) {
		for _, app := range []string{apps[0].app, apps[1].app, filler} {
			if ok, err := h.Running(t, app, perApp)(ctx); !ok || err != nil {
				return false, err
			}
		}
		return true, nil
	}
	eventually(t, "every pod Running", 10*time.Minute, running)

	ctx, stop := context.WithCancel(t.Context())
	evicted := countEvictions(t, ctx)
	s := &pdbSampler{apps: apps}
	var wg sync.WaitGroup
	wg.Go(func() { s.run(ctx, t) })
	defer func() { stop(); wg.Wait() }()

	for round := 1; round <= rounds; round++ {
		want := fmt.Sprint(round)
		drift(t, name, want)
		eventually(t, "every node of template "+want, 15*time.Minute, func(ctx context.Context) (bool, error) {
			for _, c := range h.Claims(t, name) {
				if c.Labels[generationLabel] != want || !c.DeletionTimestamp.IsZero() {
					return false, nil
				}
			}
			return running(ctx)
		})
	}
	afterDrift := evicted()
	h.Scale(t, filler, 0)
	settled := func(ctx context.Context) (bool, error) {
		for _, b := range apps {
			if ok, err := h.Running(t, b.app, perApp)(ctx); !ok || err != nil {
				return false, err
			}
		}
		return len(h.Pods(t, filler)) == 0 && taintedIdle(t) == 0, nil
	}
	eventually(t, "the budgeted pods Running, the others gone", 5*time.Minute, settled)
	// Consolidation packs the budgeted pods onto fewer machines: wait until it stops.
	last, calm := len(h.Claims(t, name)), time.Now()
	eventually(t, "consolidation done (no claim removed for 45 s)", 10*time.Minute, func(ctx context.Context) (bool, error) {
		if n := len(h.Claims(t, name)); n != last {
			last, calm = n, time.Now()
		}
		ok, err := settled(ctx)
		return ok && time.Since(calm) > 45*time.Second, err
	})
	stop()
	wg.Wait()
	total := evicted()
	if afterDrift < 3*perApp*rounds {
		t.Errorf("%d pods evicted by the drift, want at least %d (every pod once per round)", afterDrift, 3*perApp*rounds)
	}
	if s.violations > 0 {
		t.Errorf("%d samples found fewer healthy pods than a PodDisruptionBudget allows; first: %s", s.violations, s.first)
	}
	figures("evictions-under-pdbs pods=%d+%d+%d (minAvailable %s, maxUnavailable %d, none) drift-rounds=%d evictions=%d (%d in drift, %d in consolidation, %d claims left) samples=%d violations=%d least-above-floor=%v",
		perApp, perApp, perApp, apps[0].minAvailable, apps[1].maxUnavailable, rounds, total, afterDrift, total-afterDrift, last, s.samples, s.violations, s.least)
}

// packedDeployment creates replicas pods of app (400m, 512Mi: several to a machine) on the pool's
// machines, each Ready 2 s after it is bound (a pod that starts at once would make a broken
// budget hard to see).
func packedDeployment(t testing.TB, app, poolName string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": app}
	grace := int64(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels,
				Annotations: map[string]string{localcluster.ReadyDelayAnnotation: "2s"}}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				NodeSelector:                  map[string]string{poolLabel: poolName},
				Containers: []corev1.Container{{Name: "app", Image: "pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("400m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}}},
			}}},
	}
	if err := h.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

// countEvictions watches the default namespace's pods until ctx ends and returns a count of
// those the Eviction API removed (condition DisruptionTarget, reason EvictionByEvictionAPI).
func countEvictions(t *testing.T, ctx context.Context) func() int {
	t.Helper()
	wc, err := client.NewWithWatch(h.Cluster.Config, client.Options{Scheme: h.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	list := &corev1.PodList{}
	if err := wc.List(ctx, list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]bool{}
	rv := list.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &corev1.PodList{}, client.InNamespace("default"),
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				rv = p.ResourceVersion
				if ev.Type == watch.Bookmark {
					continue
				}
				for _, c := range p.Status.Conditions {
					if c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "EvictionByEvictionAPI" {
						mu.Lock()
						seen[string(p.UID)] = true
						mu.Unlock()
					}
				}
			}
		}
	}()
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(seen)
	}
}

// pdbSampler reads the Deployments' healthy pods every second.
type pdbSampler struct {
	apps       []budgeted
	samples    int
	violations int
	first      string
	// least is, by Deployment, the fewest healthy pods above the budget's floor a sample found.
	least map[string]int
}

func (s *pdbSampler) run(ctx context.Context, t *testing.T) {
	s.least = map[string]int{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, b := range s.apps {
			d := &appsv1.Deployment{}
			pods := &corev1.PodList{}
			if err := h.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: b.app}, d); err != nil {
				continue
			}
			if err := h.Client.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels{"app": b.app}); err != nil {
				continue
			}
			healthy := 0
			for i := range pods.Items {
				if p := &pods.Items[i]; p.DeletionTimestamp.IsZero() && ready(p) {
					healthy++
				}
			}
			// The budget's floor of the replicas desired now (a scale-down lowers it).
			want := b.floor(int(*d.Spec.Replicas))
			s.samples++
			if v, ok := s.least[b.app]; !ok || healthy-want < v {
				s.least[b.app] = healthy - want
			}
			if healthy < want {
				s.violations++
				if s.first == "" {
					s.first = fmt.Sprintf("%s: %d healthy of %d desired, budget floor %d", b.app, healthy, *d.Spec.Replicas, want)
				}
			}
		}
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
