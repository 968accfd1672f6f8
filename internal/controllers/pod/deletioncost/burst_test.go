package deletioncost

import (
	"context"
	"fmt"
	"slices"
	gosync "sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
)

// BenchmarkTimeToRankABurst measures, on the real API server and the real clock, how long after
// its binding a pod of a 1,000-pod burst gets its deletion cost: ten nodes initialize two seconds
// apart, each bound 100 pods of one ReplicaSet at once the moment its claim is initialized (the
// kube-scheduler binds a burst's pods as nodes come up), with the controller's defaults (its
// debounce, period and write rate) and at a higher write rate. It reports the median, the 99th
// percentile and the longest wait, in seconds, and the seconds until the whole burst was ranked
// after its last binding.
//
//	go test -run XXX -bench BenchmarkTimeToRankABurst -benchtime 1x ./internal/controllers/pod/deletioncost/
func BenchmarkTimeToRankABurst(b *testing.B) {
	for _, qps := range []float64{DefaultWritesPerSecond, 100} {
		b.Run(fmt.Sprintf("writes=%g/s", qps), func(b *testing.B) {
			var waits []time.Duration
			var tail time.Duration
			for b.Loop() {
				waits, tail = rankBurst(b, qps, 10, 100, 2*time.Second)
			}
			slices.Sort(waits)
			at := func(q float64) float64 { return waits[min(len(waits)-1, int(q*float64(len(waits))))].Seconds() }
			b.ReportMetric(at(0.5), "s-p50")
			b.ReportMetric(at(0.99), "s-p99")
			b.ReportMetric(waits[len(waits)-1].Seconds(), "s-max")
			b.ReportMetric(tail.Seconds(), "s-after-last-binding")
		})
	}
}

// rankBurst runs the burst and returns each pod's wait from its creation (bound) to the first
// sight of its deletion cost, and how long after the last binding the last pod was ranked.
func rankBurst(b *testing.B, qps float64, nodes, perNode int, apart time.Duration) ([]time.Duration, time.Duration) {
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "rankburst-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Client.Delete(context.Background(), ns) }()
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Disruption = karpv1.Disruption{ConsolidateAfter: karpv1.NewDuration(30 * time.Second),
		ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, Budgets: []karpv1.Budget{{Nodes: "10%"}}}

	var mu gosync.Mutex
	initialized := map[string]bool{}
	var claims []*karpv1.NodeClaim
	for i := range nodes {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", ns.Name, i), Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}}}
		if err := env.Client.Create(ctx, nc); err != nil {
			b.Fatal(err)
		}
		defer func() { _ = env.Client.Delete(context.Background(), nc) }()
		claims = append(claims, nc)
	}
	// The snapshot reads the namespace's pods from the API server, as the disruption controller's
	// cache holds them, on the nodes whose claims have initialized.
	snapshot := func(ctx context.Context) (*disruptionplan.Snapshot, error) {
		list := &corev1.PodList{}
		if err := env.Client.List(ctx, list, client.InNamespace(ns.Name)); err != nil {
			return nil, err
		}
		byNode := map[string][]*corev1.Pod{}
		for i := range list.Items {
			byNode[list.Items[i].Spec.NodeName] = append(byNode[list.Items[i].Spec.NodeName], &list.Items[i])
		}
		snap := &disruptionplan.Snapshot{Now: time.Now(), NodePools: []disruptionplan.Pool{{NodePool: np}}}
		mu.Lock()
		defer mu.Unlock()
		for _, claim := range claims {
			nc := claim.DeepCopy()
			if initialized[nc.Name] {
				nc.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue},
					{Type: karpv1.ConditionTypeConsolidatable, Status: metav1.ConditionTrue}}
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nc.Name}, Status: corev1.NodeStatus{
				Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("128"), corev1.ResourceMemory: resource.MustParse("512Gi")},
				Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
			snap.Nodes = append(snap.Nodes, &disruptionplan.Node{NodeClaim: nc, Node: node, Pods: byNode[nc.Name]})
		}
		return snap, nil
	}

	informers, err := crcache.New(env.Config, crcache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]crcache.Config{ns.Name: {}, "": {}}})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = informers.Start(ctx) }()
	bound := map[string]time.Time{}
	seen := map[string]time.Time{}
	podInformer, err := informers.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		b.Fatal(err)
	}
	note := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Namespace != ns.Name {
			return
		}
		if _, has := p.Annotations[corev1.PodDeletionCost]; has {
			mu.Lock()
			if _, done := seen[p.Name]; !done {
				seen[p.Name] = time.Now()
			}
			mu.Unlock()
		}
	}
	if _, err := podInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: note, UpdateFunc: func(_, obj any) { note(obj) }}); err != nil {
		b.Fatal(err)
	}
	if !informers.WaitForCacheSync(ctx) {
		b.Fatal("informers did not sync")
	}
	ctl := &Controller{Client: namespaced{env.Client, ns.Name}, Clock: clock.RealClock{}, Snapshot: snapshot, Enabled: true,
		Informers: informers, WritesPerSecond: qps}
	go func() { _ = ctl.Start(ctx) }()

	var last time.Time
	for i, claim := range claims {
		if i > 0 {
			time.Sleep(apart)
		}
		stored := &karpv1.NodeClaim{}
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), stored); err != nil {
			b.Fatal(err)
		}
		meta.SetStatusCondition(&stored.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, Reason: "Initialized"})
		mu.Lock()
		initialized[claim.Name] = true
		mu.Unlock()
		if err := env.Client.Status().Update(ctx, stored); err != nil {
			b.Fatal(err)
		}
		for j := range perNode {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: fmt.Sprintf("p-%d-%d", i, j),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: types.UID("rs-web-" + ns.Name), Controller: new(true)}}},
				Spec: corev1.PodSpec{NodeName: claim.Name, Containers: []corev1.Container{{Name: "c", Image: "x",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
			if err := env.Client.Create(ctx, p); err != nil {
				b.Fatal(err)
			}
			last = time.Now()
			mu.Lock()
			bound[p.Name] = last
			mu.Unlock()
		}
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == nodes*perNode {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("after 5 minutes %d of %d pods ranked", n, nodes*perNode)
		}
		time.Sleep(50 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var waits []time.Duration
	var lastSeen time.Time
	for name, at := range bound {
		waits = append(waits, seen[name].Sub(at))
		if seen[name].After(lastSeen) {
			lastSeen = seen[name]
		}
	}
	return waits, lastSeen.Sub(last)
}
