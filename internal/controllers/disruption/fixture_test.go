package disruption

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// fixture is one test's cluster: a SimNodeClass and an on-demand NodePool over m5 types, nodes
// and pods written straight to the API server (no lifecycle controller), a controller with a
// fake clock and no validation period unless the test sets one.
type fixture struct {
	t     *testing.T
	clk   *clocktesting.FakeClock
	pool  *karpv1.NodePool
	its   map[string]*cloudprovider.InstanceType
	rec   *events.FakeRecorder
	ctrl  *Controller
	cloud *simtest.Cloud
	ns    string
}

func newFixture(t *testing.T, name string, edit func(np *karpv1.NodePool)) *fixture {
	t.Helper()
	ctx := t.Context()
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large", "m5.xlarge", "m5.2xlarge"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: karpv1.NodePoolSpec{
		Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: name},
			Requirements: karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
		}},
		Disruption: karpv1.Disruption{ConsolidateAfter: karpv1.NewDuration(0), ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
			Budgets: []karpv1.Budget{{Nodes: "100%"}}},
	}}
	if edit != nil {
		edit(np)
	}
	if err := env.Client.Create(ctx, np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	sc := simtest.New(t, env.Client)
	types, err := sc.Provider.GetInstanceTypes(ctx, np)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, clk: sc.Clock, pool: np, its: map[string]*cloudprovider.InstanceType{}, rec: events.NewFakeRecorder(1000), cloud: sc, ns: name}
	for _, it := range types {
		f.its[it.Name] = it
	}
	f.ctrl = f.controller()
	t.Cleanup(f.cleanup)
	return f
}

// controller is a new controller over the fixture's cluster, as after a restart.
func (f *fixture) controller() *Controller {
	return &Controller{Client: env.Client, APIReader: env.Client, Cloud: f.cloud.Provider, Clock: f.clk, Recorder: f.rec,
		Options: Options{ValidationPeriod: -1}}
}

// cleanup removes the test's claims, nodes and pods, so that the next test's snapshot does not
// see them.
func (f *fixture) cleanup() {
	ctx := context.Background()
	ncs := &karpv1.NodeClaimList{}
	_ = env.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: f.pool.Name})
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		nc.Finalizers = nil
		_ = env.Client.Update(ctx, nc)
		_ = env.Client.Delete(ctx, nc)
	}
	nodes := &corev1.NodeList{}
	_ = env.Client.List(ctx, nodes, client.MatchingLabels{karpv1.NodePoolLabelKey: f.pool.Name})
	for i := range nodes.Items {
		_ = env.Client.Delete(ctx, &nodes.Items[i])
	}
	_ = env.Client.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(f.ns), client.GracePeriodSeconds(0))
}

// node creates an initialized, consolidatable NodeClaim of the pool with its Ready Node of the
// instance type, and the pods (1 CPU each unless given) bound to it.
func (f *fixture) node(name, itName string, podCPUs ...string) (*karpv1.NodeClaim, *corev1.Node) {
	t, ctx := f.t, f.t.Context()
	t.Helper()
	it := f.its[itName]
	if it == nil {
		t.Fatalf("no instance type %s", itName)
	}
	labels := map[string]string{karpv1.NodePoolLabelKey: f.pool.Name, karpv1.InstanceTypeLabelKey: itName, karpv1.ZoneLabelKey: "zone-a",
		karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand, corev1.LabelHostname: name,
		karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux}
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: karpv1.NodeClaimSpec{
		NodeClassRef: f.pool.Spec.Template.Spec.NodeClassRef, Requirements: f.pool.Spec.Template.Spec.Requirements}}
	if err := env.Client.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	nc.Status.ProviderID = "sim:///" + name
	nc.Status.NodeName = name
	nc.Status.Capacity, nc.Status.Allocatable = it.Capacity, it.Allocatable()
	for _, c := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeConsolidatable} {
		nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c, LastTransitionTime: metav1.Now()})
	}
	if err := env.Client.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{ProviderID: nc.Status.ProviderID}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status = corev1.NodeStatus{Capacity: it.Capacity, Allocatable: it.Allocatable(),
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	if err := env.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	for i, cpu := range podCPUs {
		f.pod(fmt.Sprintf("%s-%d", name, i), name, cpu)
	}
	return nc, node
}

// pod creates a running pod of a ReplicaSet bound to the node.
func (f *fixture) pod(name, node, cpu string) *corev1.Pod {
	t, ctx := f.t, f.t.Context()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": "web"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: types.UID(f.ns + "-web"), Controller: new(true)}}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
	if err := env.Client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	if err := env.Client.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// round runs one round and fails the test on error.
func (f *fixture) round(c *Controller) time.Duration {
	f.t.Helper()
	wait, err := c.Round(f.t.Context())
	if err != nil {
		f.t.Fatalf("round: %v", err)
	}
	return wait
}

func (f *fixture) claim(name string) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(f.t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		return nil
	}
	return nc
}

func (f *fixture) tainted(name string) bool {
	n := &corev1.Node{}
	if err := env.Client.Get(f.t.Context(), client.ObjectKey{Name: name}, n); err != nil {
		f.t.Fatal(err)
	}
	return nodeclaims.Disrupted(n)
}

// planned reports whether the node carries nodeclaims.PlannedTaint.
func (f *fixture) planned(name string) bool {
	n := &corev1.Node{}
	if err := env.Client.Get(f.t.Context(), client.ObjectKey{Name: name}, n); err != nil {
		f.t.Fatal(err)
	}
	return nodeclaims.Planned(n)
}

// replacements are the pool's NodeClaims launched by disruption.
func (f *fixture) replacements() []karpv1.NodeClaim {
	ncs := &karpv1.NodeClaimList{}
	if err := env.Client.List(f.t.Context(), ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: f.pool.Name}); err != nil {
		f.t.Fatal(err)
	}
	var out []karpv1.NodeClaim
	for _, nc := range ncs.Items {
		if nc.Annotations["capstan.dev/disruption-replacement"] != "" {
			out = append(out, nc)
		}
	}
	return out
}

// initialize marks a replacement launched, registered and initialized.
func (f *fixture) initialize(nc *karpv1.NodeClaim) {
	for _, c := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized} {
		nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c, LastTransitionTime: metav1.Now()})
	}
	if err := env.Client.Status().Update(f.t.Context(), nc); err != nil {
		f.t.Fatal(err)
	}
}

// events drains the recorder.
func (f *fixture) events() []string {
	var out []string
	for {
		select {
		case e := <-f.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func commandOf(t *testing.T, nc *karpv1.NodeClaim) *commandState {
	v, ok := nc.Annotations[CommandAnnotationKey]
	if !ok {
		return nil
	}
	st := &commandState{}
	if err := json.Unmarshal([]byte(v), st); err != nil {
		t.Fatal(err)
	}
	return st
}
