package provisioning

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// Each test works in its own namespace and NodePool names, and deletes what it made.
func setup(t *testing.T, pools ...*karpv1.NodePool) (*Provisioner, *events.FakeRecorder) {
	t.Helper()
	ctx := t.Context()
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "prov-" + strings.ToLower(t.Name())},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a", "zone-b"}, InstanceTypes: []string{"m5.large", "m5.xlarge", "m5.2xlarge", "m5.4xlarge", "c5.large", "c5.xlarge"}}}
	if err := env.Client.Create(ctx, snc); err != nil {
		t.Fatal(err)
	}
	for _, np := range pools {
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: snc.Name}
		if err := env.Client.Create(ctx, np); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		ncs := &karpv1.NodeClaimList{}
		_ = env.Client.List(ctx, ncs)
		for i := range ncs.Items {
			nc := &ncs.Items[i]
			nc.Finalizers = nil
			_ = env.Client.Update(ctx, nc)
			_ = env.Client.Delete(ctx, nc)
		}
		for _, np := range pools {
			_ = env.Client.Delete(ctx, np)
		}
		_ = env.Client.Delete(ctx, snc)
	})
	sc := simtest.New(t, env.Client)
	rec := events.NewFakeRecorder(10000)
	return &Provisioner{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Recorder: rec}, rec
}

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "prov-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pods := &corev1.PodList{}
		_ = env.Client.List(context.Background(), pods, client.InNamespace(ns.Name))
		for i := range pods.Items {
			_ = env.Client.Delete(context.Background(), &pods.Items[i], client.GracePeriodSeconds(0))
		}
		_ = env.Client.Delete(context.Background(), ns)
	})
	return ns.Name
}

// pendingPods creates pods the scheduler has marked unschedulable.
func pendingPods(t *testing.T, ns, prefix string, n int, cpu string, mutate func(*corev1.Pod)) {
	t.Helper()
	for i := range n {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: ns, Labels: map[string]string{"app": prefix}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}},
		}
		if mutate != nil {
			mutate(p)
		}
		if err := env.Client.Create(t.Context(), p); err != nil {
			t.Fatal(err)
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		if err := env.Client.Status().Update(t.Context(), p); err != nil {
			t.Fatal(err)
		}
	}
}

func claimsOf(t *testing.T, pool string) []karpv1.NodeClaim {
	t.Helper()
	ncs := &karpv1.NodeClaimList{}
	if err := env.Client.List(t.Context(), ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	return ncs.Items
}

func pool(name string, mutate func(*karpv1.NodePool)) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mutate != nil {
		mutate(np)
	}
	return np
}

func TestPendingPodsBecomeNodeClaimsOnce(t *testing.T) {
	np := pool("prov-basic", func(np *karpv1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": "web"}
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "web", 10, "500m", nil)

	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) == 0 {
		t.Fatal("no nodeclaim created for 10 pending pods")
	}
	claims := claimsOf(t, "prov-basic")
	if len(claims) != len(res.Created) {
		t.Fatalf("%d claims in the API, %d created", len(claims), len(res.Created))
	}
	nc := claims[0]
	if nc.Labels["team"] != "web" || nc.Annotations[karpv1.NodePoolHashAnnotationKey] == "" ||
		len(nc.OwnerReferences) != 1 || nc.OwnerReferences[0].Name != "prov-basic" || nc.Finalizers[0] != karpv1.TerminationFinalizer {
		t.Fatalf("claim metadata %+v", nc.ObjectMeta)
	}
	hasIT := false
	for _, r := range nc.Spec.Requirements {
		hasIT = hasIT || r.Key == karpv1.InstanceTypeLabelKey && r.Operator == karpv1.NodeSelectorOpIn
	}
	if !hasIT || nc.Spec.Resources.Requests.Cpu().MilliValue() < 500 {
		t.Fatalf("claim spec %+v", nc.Spec)
	}
	// What it was launched for, for `kubectl capstan explain nodeclaim`.
	if lf := nc.Annotations[planning.LaunchedForAnnotationKey]; !strings.Contains(lf, " pod(s): "+ns+"/web-") || !strings.Contains(lf, "; instance types, cheapest first: ") {
		t.Errorf("claim's %s annotation %q, want its pods and instance types", planning.LaunchedForAnnotationKey, lf)
	}
	// Each NodeClaim is its planned machine: same candidate instance types, same requests.
	for i, created := range res.Created {
		planned := res.Plan.NodeClaims[i]
		var want []string
		for _, it := range planned.InstanceTypes {
			want = append(want, it.Name)
		}
		var got []string
		for _, r := range created.Spec.Requirements {
			if r.Key == karpv1.InstanceTypeLabelKey {
				got = r.Values
			}
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("claim %d instance types %v, plan %v", i, got, want)
		}
		if created.Spec.Resources.Requests.Cpu().Cmp(*planned.Requests.Cpu()) != 0 {
			t.Fatalf("claim %d requests %v, plan %v", i, created.Spec.Resources.Requests, planned.Requests)
		}
		// The pods it was planned for are the ones told if it cannot launch.
		var nominated []string
		for _, k := range p.PodsNominatedTo(created.Name) {
			nominated = append(nominated, k.Namespace+"/"+k.Name)
		}
		var planFor []string
		for _, pod := range planned.Pods {
			planFor = append(planFor, pod.Namespace+"/"+pod.Name)
		}
		slices.Sort(nominated)
		slices.Sort(planFor)
		if len(planFor) == 0 || !slices.Equal(nominated, planFor) {
			t.Fatalf("claim %d: pods nominated %v, planned %v", i, nominated, planFor)
		}
	}
	// The same pods are still pending; they fit the in-flight claims, so nothing new is bought.
	again, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 {
		t.Fatalf("a second pass created %d more claims for pods that fit in-flight capacity", len(again.Created))
	}
}

func TestLimitsAreNeverExceeded(t *testing.T) {
	np := pool("prov-limited", func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
	})
	p, rec := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "batch", 100, "1", nil)
	for range 3 {
		if _, err := p.Provision(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	claims := claimsOf(t, "prov-limited")
	if len(claims) == 0 {
		t.Fatal("no claims at all")
	}
	// Sum the largest capacity each claim may launch as.
	total := resource.Quantity{}
	its, err := p.Cloud.GetInstanceTypes(t.Context(), np)
	if err != nil {
		t.Fatal(err)
	}
	for _, nc := range claims {
		largest := resource.Quantity{}
		for _, it := range nodeclaims.Candidates(&nc, its) {
			if c := it.Capacity[corev1.ResourceCPU]; c.Cmp(largest) > 0 {
				largest = c
			}
		}
		total.Add(largest)
	}
	if total.Cmp(resource.MustParse("16")) > 0 {
		t.Fatalf("claims may launch %s CPU against a limit of 16", total.String())
	}
	found := false
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "limits exhausted") {
			found = true
		}
	}
	if !found {
		t.Fatal("no pod was told the NodePool's limits are exhausted")
	}
}

func TestTaintedPoolTakesOnlyTolerantPods(t *testing.T) {
	orders := pool("prov-orders", func(np *karpv1.NodePool) {
		np.Spec.Template.ObjectMeta.Labels = map[string]string{"workload": "orders"}
		np.Spec.Template.Spec.Taints = karpv1.Taints{{Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}}
		w := int32(50)
		np.Spec.Weight = &w
	})
	general := pool("prov-general", nil)
	p, _ := setup(t, orders, general)
	ns := namespace(t)
	pendingPods(t, ns, "plain", 3, "500m", nil)
	pendingPods(t, ns, "orders", 3, "500m", func(pod *corev1.Pod) {
		pod.Spec.NodeSelector = map[string]string{"workload": "orders"}
		pod.Spec.Tolerations = []corev1.Toleration{{Key: "workload", Operator: corev1.TolerationOpEqual, Value: "orders", Effect: corev1.TaintEffectNoSchedule}}
	})
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, planned := range res.Plan.NodeClaims {
		for _, pod := range planned.Pods {
			onOrders := planned.NodePool == "prov-orders"
			if onOrders != strings.HasPrefix(pod.Name, "orders") {
				t.Errorf("pod %s planned on NodePool %s", pod.Name, planned.NodePool)
			}
		}
	}
	if len(claimsOf(t, "prov-orders")) == 0 || len(claimsOf(t, "prov-general")) == 0 {
		t.Fatal("want claims from both pools")
	}
}

// laggingClient lists no NodeClaims, as an informer cache that has not seen them yet.
type laggingClient struct{ client.Client }

func (c laggingClient) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*karpv1.NodeClaimList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

func TestALaggingCacheDoesNotDoubleBuy(t *testing.T) {
	p, _ := setup(t, pool("prov-lag", nil))
	p.Client = laggingClient{env.Client}
	ns := namespace(t)
	pendingPods(t, ns, "lag", 6, "1", nil)
	first, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Created) == 0 {
		t.Fatal("nothing created")
	}
	second, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Created) != 0 {
		t.Fatalf("a pass that cannot see the claims just created bought %d more", len(second.Created))
	}
}

// A claim whose launch fails at once (insufficient capacity) is deleted before the cache lists
// it. Seen deleted, it is forgotten: the next pass plans its pods again instead of counting them
// on a claim that is gone, and a claim's deletion seen before its create is recorded is not
// remembered at all.
func TestAClaimDeletedBeforeTheCacheListsItFreesItsPods(t *testing.T) {
	p, _ := setup(t, pool("prov-gone", nil))
	p.Client = laggingClient{env.Client}
	ns := namespace(t)
	pendingPods(t, ns, "gone", 3, "1", nil)
	first, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Created) == 0 {
		t.Fatal("nothing created")
	}
	for _, nc := range first.Created {
		if err := env.Client.Delete(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
		if _, err := (claimGone{p}).Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Name: nc.Name}}); err != nil {
			t.Fatal(err)
		}
	}
	second, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	placed := 0
	if second.Plan != nil {
		for _, nc := range second.Plan.NodeClaims {
			placed += len(nc.Pods)
		}
	}
	if placed != 3 {
		t.Fatalf("the pass after the claims were deleted planned %d of 3 pods onto new claims; the rest wait on claims that are gone", placed)
	}

	// Deleted before its create is recorded: not remembered.
	p.Forget("prov-gone-early")
	p.remember(&karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "prov-gone-early"}})
	for _, nc := range p.withCreated(nil) {
		if nc.Name == "prov-gone-early" {
			t.Fatal("a claim seen deleted before its create was recorded is remembered in flight")
		}
	}
}

// A pass that counts claims the client does not list yet says so, so that another pass follows
// even if the event of such a claim's deletion never comes.
func TestAPassOnLaggingClaimsAsksForAnother(t *testing.T) {
	p, _ := setup(t, pool("prov-lagging", nil))
	p.Client = laggingClient{env.Client}
	ns := namespace(t)
	pendingPods(t, ns, "lagging", 2, "1", nil)
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	second, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if second.Lagging == 0 {
		t.Fatal("the pass counted the unlisted claims in flight without saying so")
	}
}
