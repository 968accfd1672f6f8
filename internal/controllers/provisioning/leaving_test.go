package provisioning

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/nodeclaims"
)

// runningNodes gives the pool n registered m5.large nodes: one pass buys a claim per pending
// 1.5-CPU pod, each claim's Node registers (cameUp), and the pods are deleted.
func runningNodes(t *testing.T, p *Provisioner, ns string, n int) []*karpv1.NodeClaim {
	t.Helper()
	pendingPods(t, ns, "sizing", n, "1500m", nil)
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != n {
		t.Fatalf("sizing: %d claims, want %d", len(res.Created), n)
	}
	for i := range n {
		if err := env.Client.Delete(t.Context(), &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("sizing-%d", i)}},
			client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	for _, nc := range res.Created {
		cameUp(t, ns, nc, "")
	}
	return res.Created
}

// runOn creates pods bound to the node, each asking for cpu; owned ones are a ReplicaSet's.
func runOn(t *testing.T, ns, prefix, node string, n int, cpu string, owned bool) []*corev1.Pod {
	t.Helper()
	var out []*corev1.Pod
	for i := range n {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}}
		if owned {
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: prefix, UID: types.UID("rs-" + prefix),
				Controller: new(true)}}
		}
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		out = append(out, pod)
	}
	return out
}

// goAway deletes the claim; its finalizer keeps it while its node drains.
func goAway(t *testing.T, nc *karpv1.NodeClaim) {
	t.Helper()
	if err := env.Client.Delete(t.Context(), &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: nc.Name}}); err != nil {
		t.Fatal(err)
	}
}

func podsOf(plan []*corev1.Pod) []string {
	var out []string
	for _, p := range plan {
		out = append(out, p.Name)
	}
	return out
}

// The pods of three nodes going away get their machines while the nodes drain, planned once:
// a second pass buys nothing more, and when the pods are evicted and their successors come back
// pending, these fit the machines bought for them — the burst of evictions buys no more machines
// than their pods need.
func TestPodsOfNodesGoingAwayGetMachinesOnceWhileTheyDrain(t *testing.T) {
	np := m5LargePool("prov-leaving")
	p, rec := setup(t, np)
	ns := namespace(t)
	old := runningNodes(t, p, ns, 3)
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	var uids []types.UID
	for i, nc := range old {
		for _, pod := range runOn(t, ns, fmt.Sprintf("web%d", i), nc.Name, 2, "900m", true) {
			uids = append(uids, pod.UID)
		}
		goAway(t, nc)
	}
	first, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Six 900m pods, two to an m5.large (1930m): three machines.
	if len(first.Created) != 3 {
		t.Fatalf("pods of nodes going away: %d claims, want 3", len(first.Created))
	}
	for _, nc := range first.Plan.NodeClaims {
		if len(nc.Pods) != 2 {
			t.Errorf("claim planned for %v, want two of the leaving pods", podsOf(nc.Pods))
		}
	}
	for _, b := range first.Plan.Bindings {
		t.Errorf("pod %s planned onto %s: the nodes going away take no pod, and no other node has room", b.Pod.Name, b.Node)
	}
	var told []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "Nominated") {
			told = append(told, e)
		}
	}
	if len(told) != 6 || !strings.Contains(told[0], "once it leaves node ") {
		t.Errorf("Nominated events %q, want six saying the claim is for when the pod leaves", told)
	}
	// The drains wait for these claims (LaunchedFor), through their registration too.
	for _, nc := range first.Created {
		cameUp(t, ns, nc, "")
	}
	again, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 {
		t.Fatalf("a second pass bought %d more claims for pods already planned", len(again.Created))
	}
	for _, nc := range old {
		if got, planned := p.LaunchedFor(nc.Name, uids); len(got) != 3 || !planned {
			t.Errorf("the leaving pods' claims %v (planned: %v), want the three bought for them", got, planned)
		}
	}
	// The drains evict every pod at once; the ReplicaSets' successors are pending.
	pods := &corev1.PodList{}
	if err := env.Client.List(t.Context(), pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if err := env.Client.Delete(t.Context(), &pods.Items[i], client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	pendingPods(t, ns, "successor", 6, "900m", nil)
	after, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Created) != 0 || len(after.Plan.Unschedulable) != 0 {
		t.Errorf("after the evictions: %d more claims, %d pods unplaced; want none: the successors fit the machines bought for the pods they replace",
			len(after.Created), len(after.Plan.Unschedulable))
	}
	if got, _ := p.LaunchedFor(old[0].Name, uids); len(got) != 0 {
		t.Errorf("claims %v remembered for pods gone, want none", got)
	}
	if got := len(claimsOf(t, "prov-leaving")); got != 6 {
		t.Errorf("%d claims in all, want 6 (three going away, three for their pods)", got)
	}
}

// Only pods that come back elsewhere are planned: not one nobody owns (evicted, it is gone), not
// a DaemonSet's, not one a disruption's replacement has reserved room for, not one already
// terminating (its successor is pending itself).
func TestOnlyPodsThatComeBackArePlannedOffANodeGoingAway(t *testing.T) {
	np := m5LargePool("prov-leaving-which")
	p, _ := setup(t, np)
	ns := namespace(t)
	old := runningNodes(t, p, ns, 2)
	node := old[0].Name
	runOn(t, ns, "bare", node, 1, "500m", false)
	ds := runOn(t, ns, "agent", node, 1, "100m", false)[0]
	ds.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "ds-agent", Controller: new(true)}}
	if err := env.Client.Update(t.Context(), ds); err != nil {
		t.Fatal(err)
	}
	reserved := runOn(t, ns, "moving", node, 1, "500m", true)
	terminating := runOn(t, ns, "stopping", node, 1, "500m", true)[0]
	terminating.Finalizers = []string{"test.capstan.dev/hold"}
	if err := env.Client.Update(t.Context(), terminating); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), terminating); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		terminating.Finalizers = nil
		_ = env.Client.Patch(t.Context(), terminating, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	})
	// The second node stands in for a disruption's replacement, with the moving pod reserved.
	repl := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(old[1]), repl); err != nil {
		t.Fatal(err)
	}
	nodeclaims.ReservePods(repl, reserved)
	if err := env.Client.Update(t.Context(), repl); err != nil {
		t.Fatal(err)
	}
	goAway(t, old[0])
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan != nil {
		t.Errorf("planned %d claim(s), %d binding(s), %d unplaced; want no plan: no pod of the node going away comes back without room kept for it",
			len(res.Created), len(res.Plan.Bindings), len(res.Plan.Unschedulable))
	}
	// A pod of a ReplicaSet on it is planned, onto the room the second node has.
	runOn(t, ns, "web", node, 1, "500m", true)
	res, err = p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || len(res.Plan.Bindings) != 1 || res.Plan.Bindings[0].Node != old[1].Name {
		t.Errorf("the ReplicaSet's pod: %d claim(s), bindings %+v; want it planned onto node %s", len(res.Created), res.Plan.Bindings, old[1].Name)
	}
}

// Limits hold while a node drains: its claim still counts against them, so when the pool has no
// room left the pods of the node going away get no machine yet — and, running, are told nothing.
func TestPodsLeavingAPoolAtItsLimitWaitAndAreNotTold(t *testing.T) {
	np := m5LargePool("prov-leaving-limit")
	np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	p, rec := setup(t, np)
	ns := namespace(t)
	old := runningNodes(t, p, ns, 1)
	runOn(t, ns, "web", old[0].Name, 2, "900m", true)
	for len(rec.Events) > 0 {
		<-rec.Events
	}
	goAway(t, old[0])
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 {
		t.Fatalf("bought %d claim(s) past the pool's 2-CPU limit, which the draining m5.large still holds", len(res.Created))
	}
	if len(res.Plan.Unschedulable) != 2 {
		t.Errorf("%d pods unplaced, want the 2 leaving pods", len(res.Plan.Unschedulable))
	}
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "FailedScheduling") {
			t.Errorf("a running pod was told it failed scheduling: %s", e)
		}
	}
}

// When a limit binds, a pass places the most pods it allows: under `cpu: 16`, 25 pods of 1.5 CPU
// on 2-vCPU t3a.micro machines (the cheapest per pod) would be 8; on t3a.2xlarge machines, five
// to each, 10.
func TestABindingLimitPlacesTheMostPodsItAllows(t *testing.T) {
	np := pool("prov-fill-limit", func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
	})
	p, _ := setup(t, np)
	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: np.Spec.Template.Spec.NodeClassRef.Name}, snc); err != nil {
		t.Fatal(err)
	}
	snc.Spec.InstanceTypes = []string{"t3a.micro", "t3a.2xlarge"}
	if err := env.Client.Update(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	pendingPods(t, ns, "batch", 25, "1500m", nil)
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	placed := 0
	for _, nc := range res.Plan.NodeClaims {
		placed += len(nc.Pods)
	}
	if placed != 10 || len(res.Created) != 2 {
		t.Errorf("%d pods placed on %d claims under cpu: 16; want 10 on two t3a.2xlarge", placed, len(res.Created))
	}
}
