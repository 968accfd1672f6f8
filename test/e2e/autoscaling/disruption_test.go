package autoscaling

import (
	"context"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
)

// spreadOneNodeEach makes each of the deployment's pods take a node of its own.
func spreadOneNodeEach(app string) func(*corev1.PodSpec) {
	return func(ps *corev1.PodSpec) {
		ps.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}}}
	}
}

// scrape returns the running Capstan's /metrics.
func scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + s.metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// poolPrice is the hourly price of the pool's launched machines.
func poolPrice(t *testing.T, name string) float64 {
	t.Helper()
	snc := &simv1alpha1.SimNodeClass{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: name}, snc); err != nil {
		t.Fatal(err)
	}
	its, err := simInstanceTypes(snc)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, nc := range claims(t, name) {
		if nc.Labels[karpv1.InstanceTypeLabelKey] == "" {
			continue
		}
		_, launched := cheapestAllowed(nc, its)
		if math.IsInf(launched, 1) {
			t.Fatalf("NodeClaim %s: no price for %s", nc.Name, nc.Labels[karpv1.InstanceTypeLabelKey])
		}
		total += launched
	}
	return total
}

// disrupting counts the pool's claims being deleted or whose node carries the disrupted taint.
func disrupting(ctx context.Context, name string) (int, error) {
	ncs := &karpv1.NodeClaimList{}
	if err := s.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: name}); err != nil {
		return 0, err
	}
	n := 0
	for _, nc := range ncs.Items {
		if !nc.DeletionTimestamp.IsZero() {
			n++
			continue
		}
		node := &corev1.Node{}
		if nc.Status.NodeName == "" || s.Client.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, node) != nil {
			continue
		}
		if nodeclaims.Disrupted(node) {
			n++
		}
	}
	return n, nil
}

// watchMax polls f every 200 ms in the background and returns a function that stops it and
// returns the largest value seen.
func watchMax(t *testing.T, f func(context.Context) (int, error)) func() int {
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	most := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if v, err := f(ctx); err == nil {
				mu.Lock()
				most = max(most, v)
				mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return func() int {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

func TestEmptyNodesGoAfterConsolidateAfterOneAtATime(t *testing.T) {
	const after = 20 * time.Second
	pool(t, "e2e-empty", nil, func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(after)
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "1"}}
	})
	d := deployment(t, "empty", "e2e-empty", 4, "500m", "512Mi", spreadOneNodeEach("empty"))
	eventually(t, "4 pods Running", 2*time.Minute, running(t, "empty", 4))
	if n := len(claims(t, "e2e-empty")); n != 4 {
		t.Fatalf("%d NodeClaims, want one per pod", n)
	}
	stop := watchMax(t, func(ctx context.Context) (int, error) { return disrupting(ctx, "e2e-empty") })
	scaled := time.Now()
	scale(t, d, 0)
	deleted := map[string]time.Time{}
	eventually(t, "the empty nodes deleted", 4*time.Minute, func(context.Context) (bool, error) {
		left := claims(t, "e2e-empty")
		for _, nc := range left {
			if !nc.DeletionTimestamp.IsZero() {
				deleted[nc.Name] = nc.DeletionTimestamp.Time
			}
		}
		return len(left) == 0, nil
	})
	if most := stop(); most > 1 {
		t.Errorf("%d nodes were being disrupted at once; the budget allows 1", most)
	}
	for name, at := range deleted {
		// Timestamps have second precision.
		if at.Sub(scaled) < after-time.Second {
			t.Errorf("NodeClaim %s deleted %s after its pods went; consolidateAfter is %s", name, at.Sub(scaled), after)
		}
	}
}

func TestUnderutilizedNodesConsolidateWithinTheirPDB(t *testing.T) {
	pool(t, "e2e-under", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.InstanceTypes = []string{"m5.xlarge"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "50%"}}
	})
	// "fill" takes one node each; "web" shares them, one per node beside a fill pod.
	fill := deployment(t, "fill", "e2e-under", 10, "1700m", "1Gi", spreadOneNodeEach("fill"))
	deployment(t, "web", "e2e-under", 10, "1700m", "1Gi", nil)
	eventually(t, "20 pods Running", 3*time.Minute, func(ctx context.Context) (bool, error) {
		a, _ := running(t, "fill", 10)(ctx)
		b, _ := running(t, "web", 10)(ctx)
		return a && b, nil
	})
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(8)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	if err := s.Client.Create(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), pdb) })
	// Deleting "fill" leaves ten nodes each half used by one web pod.
	if err := s.Client.Delete(t.Context(), fill); err != nil {
		t.Fatal(err)
	}
	eventually(t, "fill pods gone", time.Minute, func(context.Context) (bool, error) { return len(pods(t, "fill")) == 0, nil })
	before := poolPrice(t, "e2e-under")
	lowest := watchMax(t, func(ctx context.Context) (int, error) {
		// The most web pods missing at any poll.
		up := 0
		for _, p := range pods(t, "web") {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() {
				up++
			}
		}
		return 10 - up, nil
	})
	eventually(t, "five nodes left", 5*time.Minute, func(ctx context.Context) (bool, error) {
		n := 0
		for _, nc := range claims(t, "e2e-under") {
			if nc.DeletionTimestamp.IsZero() {
				n++
			}
		}
		ok, _ := running(t, "web", 10)(ctx)
		return n == 5 && ok, nil
	})
	if missing := lowest(); missing > 2 {
		t.Errorf("%d web pods were down at once; the PDB keeps 8 of 10", missing)
	}
	eventually(t, "deleted claims gone", 2*time.Minute, func(context.Context) (bool, error) { return len(claims(t, "e2e-under")) == 5, nil })
	if after := poolPrice(t, "e2e-under"); after >= before {
		t.Errorf("price %.4f $/h after consolidation, %.4f before", after, before)
	}
	body := scrape(t)
	for _, want := range []string{`karpenter_voluntary_disruption_decisions_total{consolidation_type=`, `reason="underutilized"}`,
		`karpenter_pods_disrupted_total{nodepool="e2e-under",reason="underutilized"}`,
		`capstan_disruption_savings_dollars_per_hour{nodepool="e2e-under",reason="underutilized"}`,
		`karpenter_nodepools_allowed_disruptions{nodepool="e2e-under",reason="underutilized"}`,
		`karpenter_voluntary_disruption_eligible_nodes{reason="underutilized"}`,
		`karpenter_nodeclaims_disrupted_total{capacity_type="on-demand",consolidation_policy="WhenEmptyOrUnderutilized",nodepool="e2e-under",reason="underutilized",termination_mode="graceful"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func TestLargeNodeIsReplacedByAReadyCheaperOne(t *testing.T) {
	pool(t, "e2e-replace", nil, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
		// Nothing is consolidated until the test is ready.
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
	})
	big := deployment(t, "big", "e2e-replace", 1, "14", "8Gi", nil)
	small := deployment(t, "small", "e2e-replace", 2, "250m", "256Mi", nil)
	eventually(t, "3 pods Running", 2*time.Minute, func(ctx context.Context) (bool, error) {
		a, _ := running(t, "big", 1)(ctx)
		b, _ := running(t, "small", 2)(ctx)
		return a && b, nil
	})
	old := claims(t, "e2e-replace")
	if len(old) != 1 {
		t.Fatalf("%d NodeClaims, want one large machine for all three pods", len(old))
	}
	_ = small
	scale(t, big, 0)
	eventually(t, "big pod gone", time.Minute, func(context.Context) (bool, error) { return len(pods(t, "big")) == 0, nil })
	before := poolPrice(t, "e2e-replace")
	np := &karpv1.NodePool{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: "e2e-replace"}, np); err != nil {
		t.Fatal(err)
	}
	orig := np.DeepCopy()
	np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(0)
	if err := s.Client.Patch(t.Context(), np, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	var replacement karpv1.NodeClaim
	eventually(t, "the large node replaced", 3*time.Minute, func(ctx context.Context) (bool, error) {
		var oldGone bool
		found := false
		for _, nc := range claims(t, "e2e-replace") {
			if nc.Name == old[0].Name {
				continue
			}
			replacement, found = nc, true
		}
		oldGone = true
		for _, nc := range claims(t, "e2e-replace") {
			if nc.Name == old[0].Name {
				oldGone = false
			}
		}
		ok, _ := running(t, "small", 2)(ctx)
		return found && oldGone && ok, nil
	})
	if replacement.Annotations["capstan.dev/disruption-replacement"] != "SingleNodeConsolidation" {
		t.Errorf("replacement %s annotations %v", replacement.Name, replacement.Annotations)
	}
	// Ready before the old node was drained: the old claim's pods moved to an initialized node.
	init := meta.FindStatusCondition(replacement.Status.Conditions, karpv1.ConditionTypeInitialized)
	if init == nil || init.Status != metav1.ConditionTrue {
		t.Fatalf("replacement %s not initialized: %+v", replacement.Name, replacement.Status.Conditions)
	}
	for _, p := range pods(t, "small") {
		if p.Spec.NodeName != replacement.Status.NodeName {
			t.Errorf("pod %s runs on %s, not on the replacement %s", p.Name, p.Spec.NodeName, replacement.Status.NodeName)
		}
		if p.CreationTimestamp.Before(&init.LastTransitionTime) {
			t.Errorf("pod %s was created at %s, before the replacement initialized at %s", p.Name, p.CreationTimestamp, init.LastTransitionTime)
		}
	}
	if after := poolPrice(t, "e2e-replace"); after >= before {
		t.Errorf("price %.4f $/h after the replacement, %.4f before", after, before)
	}
	_, creates := cloudState(t)
	if creates[replacement.Name] != 1 {
		t.Errorf("the replacement launched %d machines", creates[replacement.Name])
	}
}

func TestDriftReplacesEveryNodeWithinBudget(t *testing.T) {
	pool(t, "e2e-drift", nil, func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "1"}}
	})
	deployment(t, "drift", "e2e-drift", 3, "500m", "512Mi", spreadOneNodeEach("drift"))
	eventually(t, "3 pods Running", 2*time.Minute, running(t, "drift", 3))
	old := map[string]bool{}
	for _, nc := range claims(t, "e2e-drift") {
		old[nc.Name] = true
	}
	stop := watchMax(t, func(ctx context.Context) (int, error) { return disrupting(ctx, "e2e-drift") })
	np := &karpv1.NodePool{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: "e2e-drift"}, np); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(np.Status.Conditions, nodepools.ConditionTypeRolledOut); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("before the change: condition %s %+v, want True", nodepools.ConditionTypeRolledOut, c)
	}
	rollout := watchRollout(t, "e2e-drift")
	orig := np.DeepCopy()
	np.Spec.Template.ObjectMeta.Labels["team"] = "blue"
	if err := s.Client.Patch(t.Context(), np, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "every node replaced", 5*time.Minute, func(ctx context.Context) (bool, error) {
		ncs := claims(t, "e2e-drift")
		for _, nc := range ncs {
			if old[nc.Name] || nc.Labels["team"] != "blue" {
				return false, nil
			}
		}
		ok, _ := running(t, "drift", 3)(ctx)
		return len(ncs) == 3 && ok, nil
	})
	if most := stop(); most > 1 {
		t.Errorf("%d nodes were being disrupted at once; the budget allows 1", most)
	}
	// The pool's rollout status followed: RollingOut with the counts, then RolledOut at the new
	// generation.
	eventually(t, "the pool RolledOut at its new generation", time.Minute, func(ctx context.Context) (bool, error) {
		got := &karpv1.NodePool{}
		if err := s.Client.Get(ctx, client.ObjectKey{Name: "e2e-drift"}, got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, nodepools.ConditionTypeRolledOut)
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == got.Generation, nil
	})
	if seen := rollout(); !slices.ContainsFunc(seen, func(c metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && c.Reason == "RollingOut" && strings.Contains(c.Message, "of 3 node(s) drifted")
	}) {
		t.Errorf("the pool's %s conditions over the rollout %+v: never False/RollingOut with the counts", nodepools.ConditionTypeRolledOut, seen)
	}
}

// watchRollout records, from a watch, every capstan.dev/RolledOut condition the pool's status
// takes; the function it returns stops the watch and returns them.
func watchRollout(t *testing.T, pool string) func() []metav1.Condition {
	t.Helper()
	wc, err := client.NewWithWatch(s.Cluster.Config, client.Options{Scheme: s.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	w, err := wc.Watch(ctx, &karpv1.NodePoolList{}, client.MatchingFields{"metadata.name": pool})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []metav1.Condition
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if np, ok := ev.Object.(*karpv1.NodePool); ok {
				if c := meta.FindStatusCondition(np.Status.Conditions, nodepools.ConditionTypeRolledOut); c != nil {
					mu.Lock()
					seen = append(seen, *c)
					mu.Unlock()
				}
			}
		}
	}()
	return func() []metav1.Condition {
		cancel()
		w.Stop()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
}
