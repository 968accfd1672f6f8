package status

import (
	"context"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestStatusCountsClaimsAndReportsReadiness(t *testing.T) {
	sc := simtest.New(t, env.Client)
	clk, p := sc.Clock, sc.Provider
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	// The pool reads as one stored before its CRD checked label and taint values.
	stale := true
	c := &Controller{Client: &testenv.StoredBefore{Client: env.Client, Edit: func(obj client.Object) {
		if np, ok := obj.(*karpv1.NodePool); ok && np.Name == "status" && stale {
			np.Spec.Template.ObjectMeta.Labels["team"] = "bad value!"
			np.Spec.Template.Spec.Taints[0].Value = "x';touch /tmp/p;'"
		}
	}}, Cloud: p, Clock: clk, Metrics: m}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "status"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "status"}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": "web"}
	np.Spec.Template.Spec.Taints = karpv1.Taints{{Key: "workload", Value: "web", Effect: corev1.TaintEffectNoSchedule}}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"status-a", "status-b"} {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{karpv1.NodePoolLabelKey: "status"}},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: karpv1.Requirements{}}}
		if err := env.Client.Create(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
		nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")}
		if err := env.Client.Status().Update(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
	}
	get := func() *karpv1.NodePool {
		if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "status"}}); err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "status"}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := get()
	if got.Status.Nodes != 2 || got.Status.Resources.Cpu().Cmp(resource.MustParse("8")) != 0 {
		t.Fatalf("status %+v", got.Status)
	}
	if v := testutil.ToFloat64(m.NodePoolUsage.WithLabelValues("status", "cpu")); v != 8 {
		t.Fatalf("karpenter_nodepools_usage{resource_type=cpu} = %v, want 8", v)
	}
	// No SimNodeClass yet, and a bad label value and taint value: not ready, saying why.
	if meta.IsStatusConditionTrue(got.Status.Conditions, karpv1.ConditionTypeNodeClassReady) ||
		meta.IsStatusConditionTrue(got.Status.Conditions, karpv1.ConditionTypeReady) {
		t.Fatalf("conditions %+v", got.Status.Conditions)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeValidationSucceeded)
	if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "spec.template.metadata.labels[team]") ||
		!strings.Contains(cond.Message, "spec.template.spec.taints[0].value") {
		t.Fatalf("ValidationSucceeded with a bad label value and taint value: %+v", cond)
	}
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "status"}}
	if err := env.Client.Create(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	stale = false // the user corrects the pool
	if got = get(); !meta.IsStatusConditionTrue(got.Status.Conditions, karpv1.ConditionTypeReady) {
		t.Fatalf("not Ready with a NodeClass and valid labels: %+v", got.Status.Conditions)
	}
	if got.Annotations[karpv1.NodePoolHashAnnotationKey] != nodepools.Hash(got) {
		t.Fatal("hash annotation missing or stale")
	}
	// A per-node cost that is not a price: validation fails, naming the annotation and value.
	orig := got.DeepCopy()
	got.Annotations[nodepools.NodeCostAnnotationKey] = "cheap"
	if err := env.Client.Patch(t.Context(), got, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	got = get()
	cond = meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeValidationSucceeded)
	if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, nodepools.NodeCostAnnotationKey) || !strings.Contains(cond.Message, `"cheap"`) {
		t.Fatalf("ValidationSucceeded with node cost \"cheap\": %+v", cond)
	}
	orig = got.DeepCopy()
	got.Annotations[nodepools.NodeCostAnnotationKey] = "0.012"
	if err := env.Client.Patch(t.Context(), got, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if got = get(); !meta.IsStatusConditionTrue(got.Status.Conditions, karpv1.ConditionTypeReady) {
		t.Fatalf("not Ready with a valid node cost: %+v", got.Status.Conditions)
	}
}

// Claims stamped by an older hash scheme take the pool's current hash unless they are already
// drifted: an upgrade neither rolls the pool nor stops drift detection.
func TestOldHashVersionsAreRestamped(t *testing.T) {
	sc := simtest.New(t, env.Client)
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "restamp"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "restamp"}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	old := map[string]string{karpv1.NodePoolHashAnnotationKey: "12345", karpv1.NodePoolHashVersionAnnotationKey: "v1"}
	for _, n := range []string{"restamp-fresh", "restamp-drifted"} {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{karpv1.NodePoolLabelKey: "restamp"}, Annotations: old},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: karpv1.Requirements{}}}
		if err := env.Client.Create(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
		if n == "restamp-drifted" {
			nc.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted", LastTransitionTime: metav1.Now()}}
			if err := env.Client.Status().Update(t.Context(), nc); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "restamp"}}); err != nil {
		t.Fatal(err)
	}
	stored := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "restamp"}, stored); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][2]string{
		"restamp-fresh":   {stored.Annotations[karpv1.NodePoolHashAnnotationKey], nodepools.HashVersion},
		"restamp-drifted": {"12345", "v1"},
	} {
		nc := &karpv1.NodeClaim{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
			t.Fatal(err)
		}
		if got := [2]string{nc.Annotations[karpv1.NodePoolHashAnnotationKey], nc.Annotations[karpv1.NodePoolHashVersionAnnotationKey]}; got != want {
			t.Errorf("%s stamped %v, want %v", name, got, want)
		}
	}
}

// staleClient answers Gets of one NodePool with a copy taken earlier, as an informer cache that
// has not seen the latest writes.
type staleClient struct {
	client.Client
	stale *karpv1.NodePool
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if np, ok := obj.(*karpv1.NodePool); ok && key.Name == c.stale.Name {
		c.stale.DeepCopyInto(np)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// The status is written locked on the version read: from a stale read, a condition another writer
// set since is never erased (a merge patch writes the conditions list whole).
func TestStaleReadKeepsAnotherWritersCondition(t *testing.T) {
	sc := simtest.New(t, env.Client)
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "stale-status"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "stale-status"}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: "stale-status"}}
	if _, err := c.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	cur := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), req.NamespacedName, cur); err != nil {
		t.Fatal(err)
	}
	// The controller's cache lags: it has not seen its own Ready condition, nor what comes next.
	stale := cur.DeepCopy()
	meta.RemoveStatusCondition(&stale.Status.Conditions, karpv1.ConditionTypeReady)
	const audited = "example.com/Audited"
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: audited, Status: metav1.ConditionTrue, Reason: "Audited"})
	if err := env.Client.Status().Update(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	c.Client = staleClient{Client: env.Client, stale: stale}
	if _, err := c.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	c.Client = env.Client
	if _, err := c.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	got := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if meta.FindStatusCondition(got.Status.Conditions, audited) == nil || meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeReady) == nil {
		t.Fatalf("conditions %v, want %s kept beside Ready", got.Status.Conditions, audited)
	}
}

// A static pool says on its StaticCapacity condition whether Capstan keeps its count: False,
// FeatureGateDisabled, while the gate is off; True with it on. A dynamic pool has no such
// condition.
func TestStaticPoolsSayWhetherTheGateIsOn(t *testing.T) {
	sc := simtest.New(t, env.Client)
	replicas := int64(2)
	mk := func(name string, r *int64) *karpv1.NodePool {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karpv1.NodePoolSpec{Replicas: r}}
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: name}
		if err := env.Client.Create(t.Context(), np); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
		return np
	}
	static, dynamic := mk("status-static", &replicas), mk("status-dynamic", nil)
	cond := func(gate bool, np *karpv1.NodePool) *metav1.Condition {
		t.Helper()
		c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, StaticCapacity: gate}
		if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(np)}); err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(np), got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, ConditionTypeStaticCapacity)
	}
	if c := cond(false, static); c == nil || c.Status != metav1.ConditionFalse || c.Reason != "FeatureGateDisabled" || !strings.Contains(c.Message, "StaticCapacity feature gate is off") {
		t.Fatalf("gate off: %+v", c)
	}
	if c := cond(true, static); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("gate on: %+v", c)
	}
	if c := cond(false, dynamic); c != nil {
		t.Fatalf("dynamic pool: %+v", c)
	}
}

// The pool's capstan.dev/RolledOut condition and capstan_nodepool_rollout_nodes follow a rollout:
// False with the counts while nodes are drifted (waiting, or held by a disruption command),
// True once every node is of the current template; a node being deleted that was up to date
// (consolidation) is not the pool's any more.
func TestRolloutStatusFollowsDrift(t *testing.T) {
	sc := simtest.New(t, env.Client)
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Metrics: m}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "rollout"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "rollout"}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	hash := nodepools.Hash(np)
	claim := func(name string, annotations map[string]string, drifted bool) *karpv1.NodeClaim {
		t.Helper()
		a := map[string]string{karpv1.NodePoolHashAnnotationKey: hash, karpv1.NodePoolHashVersionAnnotationKey: nodepools.HashVersion}
		for k, v := range annotations {
			a[k] = v
		}
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "rollout"}, Annotations: a},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: karpv1.Requirements{}}}
		if err := env.Client.Create(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
		if drifted {
			nc.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodeClassDrifted", LastTransitionTime: metav1.Now()}}
			if err := env.Client.Status().Update(t.Context(), nc); err != nil {
				t.Fatal(err)
			}
		}
		return nc
	}
	condition := func() *metav1.Condition {
		t.Helper()
		if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "rollout"}}); err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "rollout"}, got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, nodepools.ConditionTypeRolledOut)
	}
	claim("rollout-current", nil, false)
	if cond := condition(); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "RolledOut" {
		t.Fatalf("one node of the current template: condition %+v, want True/RolledOut", cond)
	}
	claim("rollout-old-hash", map[string]string{karpv1.NodePoolHashAnnotationKey: "1234"}, false)
	claim("rollout-drifted", nil, true)
	claim("rollout-replacing", map[string]string{"capstan.dev/disruption-command": `{"id":"x"}`}, true)
	cond := condition()
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "RollingOut" ||
		cond.Message != "2 of 4 node(s) drifted and waiting, 1 being replaced, 1 up to date" {
		t.Fatalf("condition %+v, want False/RollingOut with 2 drifted, 1 replacing, 1 up to date", cond)
	}
	for state, want := range map[string]float64{"up_to_date": 1, "drifted": 2, "replacing": 1} {
		if got := testutil.ToFloat64(m.NodePoolRollout.WithLabelValues("rollout", state)); got != want {
			t.Errorf("capstan_nodepool_rollout_nodes{state=%q} = %v, want %v", state, got, want)
		}
	}
	// The drifted ones go (their replacements are of the current template): rolled out.
	for _, n := range []string{"rollout-old-hash", "rollout-drifted", "rollout-replacing"} {
		if err := env.Client.Delete(t.Context(), &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	claim("rollout-new", nil, false)
	if cond := condition(); cond == nil || cond.Status != metav1.ConditionTrue || cond.Message != "all 2 node(s) are built from the current template and NodeClass" {
		t.Fatalf("after the rollout: condition %+v, want True with 2 nodes", cond)
	}
}
