package explain

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/provreq"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func create(t *testing.T, objs ...interface {
	metav1.Object
	runtime.Object
}) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
}

// Three pending pods, each kept from its NodePool by one thing — a taint it does not tolerate,
// the pool's limit, no instance type large enough — and a fourth that fits: explain names each
// reason exactly, the NodePool it came closest with and what would make it fit.
func TestExplainPendingPods(t *testing.T) {
	class := func(name string, types ...string) *simv1alpha1.SimNodeClass {
		return &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: types}}
	}
	pool := func(name, cls, team string, mutate func(*karpv1.NodePool)) *karpv1.NodePool {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
		np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": team}
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: cls}
		if mutate != nil {
			mutate(np)
		}
		return np
	}
	create(t, class("explain-large", "m5.large", "m5.xlarge", "m5.2xlarge"), class("explain-small", "m5.large"),
		pool("explain-gpu", "explain-large", "ml", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
		}),
		pool("explain-capped", "explain-large", "web", func(np *karpv1.NodePool) {
			np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}),
		pool("explain-small", "explain-small", "batch", nil),
		pool("explain-open", "explain-large", "search", nil))
	sim := simtest.New(t, env.Client)
	pod := func(name, team, cpu string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"team": team},
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
		create(t, p)
		return p
	}
	// held marks the pod as its two machines came up without it, on the cluster's current inputs
	// (in memory, as dra).
	held := func(p *corev1.Pod) *corev1.Pod {
		st, err := planning.ReadState(t.Context(), env.Client, sim.Provider, planning.Settings{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		p.Annotations = map[string]string{planning.MissedAnnotationKey: planning.MissedValue(st.Inputs, []string{"search-a", "search-b"})}
		return p
	}
	// dra gives the pod a resource claim (in memory: the answer reads the pod it is given).
	dra := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu"}}
		return p
	}
	// consumer consumes a ProvisioningRequest whose machine is booked for its pods.
	consumer := func(p *corev1.Pod) *corev1.Pod {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "explain-booked", Labels: map[string]string{karpv1.NodePoolLabelKey: "explain-open"},
			Annotations: map[string]string{provreq.RequestAnnotationKey: "default/gang", provreq.BookedUntilAnnotationKey: sim.Clock.Now().Add(time.Minute).UTC().Format(time.RFC3339)}},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "explain-large"},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.2xlarge"}},
					{Key: "team", Operator: karpv1.NodeSelectorOpIn, Values: []string{"search"}}}}}
		create(t, nc)
		p.Annotations = map[string]string{autoscalingv1.ConsumeAnnotationKey: "gang"}
		return p
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{consumer(pod("worker", "search", "1")), `Pod default/worker is pending: the pod consumes ProvisioningRequest default/gang, whose 1 machine(s) are kept for its pods`},
		{pod("trainer", "ml", "1"), `Pod default/trainer is pending: no NodePool can launch a machine for it.
Closest: NodePool explain-gpu (taint): taint nvidia.com/gpu:NoSchedule not tolerated.
To fit there: add a toleration for the taint to the pod, or use a NodePool without it.
`},
		{pod("frontend", "web", "2"), `Pod default/frontend is pending: no NodePool can launch a machine for it.
Closest: NodePool explain-capped (limits): limits exhausted: cpu 1 left, too little for any instance type.
To fit there: raise the NodePool's spec.limits, or free capacity in it.
`},
		{pod("cruncher", "batch", "3"), `Pod default/cruncher is pending: no NodePool can launch a machine for it.
Closest: NodePool explain-small (resources): no instance type has cpu 3 (the largest has cpu 1930m).
To fit there: request less, or let the NodePool use larger instance types.
`},
		{pod("indexer", "search", "1"), `Pod default/indexer is pending; provisioning launches a machine for it from NodePool explain-open: m5.large, m5.xlarge, m5.2xlarge`},
		{held(pod("retried", "search", "1")), `Pod default/retried is pending and held: it did not schedule on the 2 machines bought for it (nodeclaim/search-a, nodeclaim/search-b)`},
		{dra(pod("gpu-claim", "search", "1")), `Pod default/gpu-claim is pending: the pod has Dynamic Resource Allocation requirements: Capstan buys no machine for it`},
	} {
		a, out := explainPod(t, sim, tc.pod)
		if !strings.HasPrefix(out, tc.want) {
			t.Errorf("explain pod %s:\n%s\nwant it to start:\n%s", tc.pod.Name, out, tc.want)
		}
		if a.Closest != nil && !strings.Contains(out, "NODEPOOL") {
			t.Errorf("explain pod %s: no per-NodePool table:\n%s", tc.pod.Name, out)
		}
	}
}

// explain nodepool: the pool's nodes and price, what is left of its limits after its claims,
// what its budgets allow each reason now, and its cheapest types.
func TestExplainNodePool(t *testing.T) {
	create(t, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "explain-np"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large", "m5.xlarge"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "explain-np"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "explain-np"}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10")}
	np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonDrifted}}, {Nodes: "1"}}
	create(t, np)
	sim := simtest.New(t, env.Client)
	for _, name := range []string{"explain-np-a", "explain-np-b"} {
		nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "explain-np",
			karpv1.InstanceTypeLabelKey: "m5.large", karpv1.ZoneLabelKey: "zone-a", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand}},
			Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: np.Spec.Template.Spec.Requirements}}
		create(t, nc)
		nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
		nc.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: metav1.Now()}}
		if err := env.Client.Status().Update(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
	}
	a, err := NodePool(t.Context(), env.Client, sim.Provider, planning.Settings{}, time.Now(), "explain-np")
	if err != nil {
		t.Fatal(err)
	}
	large := 0.0
	for _, tp := range a.Cheapest {
		if tp.Name == "m5.large" {
			large = tp.Price
		}
	}
	if !a.Managed || a.Nodes != 2 || large == 0 || math.Abs(a.Price-2*large) > 1e-9 || a.InstanceTypes != 2 || a.Cheapest[0].Name != "m5.large" {
		t.Fatalf("answer %+v: want 2 managed m5.large nodes priced at twice m5.large's %.4f $/h, 2 types, m5.large cheapest", a, large)
	}
	if len(a.Limits) != 1 || a.Limits[0].Resource != "cpu" || a.Limits[0].Limit != "10" || a.Limits[0].Left != "6" {
		t.Errorf("limits %+v, want cpu 10 with 6 left after two 2-CPU claims", a.Limits)
	}
	want := map[string][2]int{"Empty": {1, 1}, "Drifted": {0, 0}, "Underutilized": {1, 1}}
	if len(a.Disruptions) != len(want) {
		t.Fatalf("disruptions %+v, want one per reason", a.Disruptions)
	}
	for _, d := range a.Disruptions {
		if w := want[d.Reason]; d.Nodes != w[0] || d.Budget != w[1] {
			t.Errorf("%s: %d allowed by budget %d, want %d by budget %d", d.Reason, d.Nodes, d.Budget, w[0], w[1])
		}
	}
	var out strings.Builder
	if err := a.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	// Each reason's budget by what it says, not only its place in the list: a nodes "0" budget
	// and one that allows a node read apart.
	for _, line := range []string{"NodePool explain-np: 2 node(s), ", "2 instance type(s) admitted; cheapest: m5.large ",
		"Drifted            0                  budget 0 (nodes: \"0\", reasons: Drifted)",
		"Underutilized      1                  budget 1 (nodes: \"1\")"} {
		if !strings.Contains(out.String(), line) {
			t.Errorf("explain nodepool printed:\n%s\nwant %q in it", out.String(), line)
		}
	}
	if strings.Contains(out.String(), "do not register") {
		t.Errorf("a pool without NodeRegistrationHealthy=False said its launches do not register:\n%s", out.String())
	}
	// explainWith sets a condition on the pool and returns what explain nodepool prints then.
	explainWith := func(cond metav1.Condition) string {
		t.Helper()
		cur := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(np), cur); err != nil {
			t.Fatal(err)
		}
		cond.LastTransitionTime = metav1.Now()
		meta.SetStatusCondition(&cur.Status.Conditions, cond)
		if err := env.Client.Status().Update(t.Context(), cur); err != nil {
			t.Fatal(err)
		}
		a, err := NodePool(t.Context(), env.Client, sim.Provider, planning.Settings{}, time.Now(), "explain-np")
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := a.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	// Its launches stop registering: the answer says so and what follows.
	text := explainWith(metav1.Condition{Type: karpv1.ConditionTypeNodeRegistrationHealthy, Status: metav1.ConditionFalse,
		Reason: "RegistrationFailed", Message: "NodeClaim x's node did not register within 15m0s"})
	if !strings.Contains(text, "Its launches do not register (NodeRegistrationHealthy=False, RegistrationFailed: NodeClaim x's node did not register within 15m0s): it is tried after every other NodePool") {
		t.Errorf("explain nodepool of an unhealthy pool printed:\n%s", text)
	}
	if strings.Contains(text, "Rollout:") {
		t.Errorf("a pool without a rollout condition printed one:\n%s", text)
	}
	// A rollout in progress, as the pool's condition says.
	text = explainWith(metav1.Condition{Type: nodepools.ConditionTypeRolledOut, Status: metav1.ConditionFalse,
		Reason: "RollingOut", Message: "1 of 2 node(s) drifted and waiting, 1 being replaced, 0 up to date"})
	if !strings.Contains(text, "Rollout: RollingOut: 1 of 2 node(s) drifted and waiting, 1 being replaced, 0 up to date.") {
		t.Errorf("explain nodepool during a rollout printed:\n%s", text)
	}
}

// A pod on a node going away is still running, but provisioning plans it already: explain says
// its node is going away and what is launched for it; a pod nobody owns (gone once evicted) is
// just running there.
func TestExplainAPodLeavingANodeGoingAway(t *testing.T) {
	create(t, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "explain-leave"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "explain-leave"}}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": "leave"}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "explain-leave"}
	create(t, np)
	sim := simtest.New(t, env.Client)
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "explain-leave-a", Labels: map[string]string{karpv1.NodePoolLabelKey: np.Name},
		Finalizers: []string{karpv1.TerminationFinalizer}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large"}}}}}
	create(t, nc)
	t.Cleanup(func() {
		_ = env.Client.Patch(context.Background(), nc, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))
	})
	nc.Status.ProviderID, nc.Status.NodeName = "sim:///explain-leave-a", "explain-leave-a"
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "explain-leave-a", Labels: map[string]string{"team": "leave"}},
		Spec: corev1.NodeSpec{ProviderID: nc.Status.ProviderID}}
	create(t, node)
	pod := func(name string, owned bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			NodeName: node.Name, NodeSelector: map[string]string{"team": "leave"},
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs-web", Controller: new(true)}}
		}
		create(t, p)
		return p
	}
	web, bare := pod("leave-web", true), pod("leave-bare", false)
	if err := env.Client.Delete(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{web, "Pod default/leave-web runs on node explain-leave-a, of NodeClaim explain-leave-a (NodePool explain-leave), which is going away.\n" +
			"Provisioning launches a machine for it now, before it leaves, from NodePool explain-leave: m5.large"},
		{bare, "Pod default/leave-bare runs on node explain-leave-a, of NodeClaim explain-leave-a (NodePool explain-leave).\n"},
	} {
		if _, out := explainPod(t, sim, tc.pod); !strings.HasPrefix(out, tc.want) {
			t.Errorf("explain pod %s:\n%s\nwant it to start:\n%s", tc.pod.Name, out, tc.want)
		}
	}
}

// explainPod is explain pod's answer for the pod, and its text.
func explainPod(t *testing.T, sim *simtest.Cloud, pod *corev1.Pod) (*PodAnswer, string) {
	t.Helper()
	a, err := Pod(t.Context(), env.Client, sim.Provider, planning.Settings{}, pod, sim.Clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := a.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	return a, out.String()
}
