package provisioning

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
)

func oneHostPerPod(app string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}}}}}
	}
}

// limits.nodes counts NodeClaims, launched or not, and is never exceeded across passes.
func TestNodesLimitHoldsAcrossPasses(t *testing.T) {
	np := pool("prov-nodes", func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{karpv1.ResourceNodes: resource.MustParse("3")}
	})
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "spread", 10, "500m", oneHostPerPod("spread"))
	for range 3 {
		if _, err := p.Provision(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(claimsOf(t, "prov-nodes")); n != 3 {
		t.Fatalf("limits.nodes 3: %d NodeClaims", n)
	}
}

// A node that registered but is not initialized still carries its startup taints and
// node.kubernetes.io/not-ready; its pods are planned onto it, not onto a second machine.
func TestStartingNodeIsInFlightCapacity(t *testing.T) {
	startup := corev1.Taint{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
	np := pool("prov-startup", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.StartupTaints = karpv1.Taints{startup}
	})
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "web", 4, "250m", nil)
	first, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Created) != 1 {
		t.Fatalf("want one claim for four small pods, got %d", len(first.Created))
	}
	claim := first.Created[0]
	// The machine launches and its Node registers with the startup and not-ready taints.
	providerID := "sim:///test/" + claim.Name
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-" + claim.Name, Labels: map[string]string{
			karpv1.NodePoolLabelKey: np.Name, corev1.LabelHostname: "node-" + claim.Name, karpv1.CapacityTypeLabelKey: "on-demand",
			corev1.LabelTopologyZone: "zone-a", karpv1.InstanceTypeLabelKey: "m5.large", karpv1.ArchLabelKey: "amd64", karpv1.OSLabelKey: "linux"}},
		Spec: corev1.NodeSpec{ProviderID: providerID, Taints: []corev1.Taint{startup,
			{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}},
	}
	if err := env.Client.Create(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1930m"), corev1.ResourceMemory: resource.MustParse("7Gi"),
		corev1.ResourcePods: resource.MustParse("29")}
	node.Status.Capacity = node.Status.Allocatable
	if err := env.Client.Status().Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	claim.Status.ProviderID = providerID
	claim.Status.NodeName = node.Name
	now := metav1.Now()
	claim.Status.Conditions = []metav1.Condition{
		{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched", LastTransitionTime: now},
		{Type: karpv1.ConditionTypeRegistered, Status: metav1.ConditionTrue, Reason: "Registered", LastTransitionTime: now},
		{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionUnknown, Reason: "AwaitingInitialization", LastTransitionTime: now},
	}
	if err := env.Client.Status().Update(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	again, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 {
		t.Fatalf("a starting node's pods were planned onto %d new claim(s)", len(again.Created))
	}
	if len(again.Plan.Bindings) != 4 {
		t.Fatalf("want the four pods planned onto the starting node, got %d bindings", len(again.Plan.Bindings))
	}
	// Once initialized, a taint still on the node is real: the pods do not tolerate it.
	conds := claim.Status.Conditions
	conds[2].Status, conds[2].Reason = metav1.ConditionTrue, "Initialized"
	if err := env.Client.Status().Update(t.Context(), claim); err != nil {
		t.Fatal(err)
	}
	third, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(third.Plan.Bindings) != 0 {
		t.Fatalf("an initialized node's remaining taints were ignored: %d bindings", len(third.Plan.Bindings))
	}
	// The node turns Ready and its startup taint goes; the not-ready taint lingers until the
	// node lifecycle controller removes it. That moment must not buy a second machine (the one
	// the third pass bought is deleted, so that the pods have only the node to go to).
	for _, nc := range third.Created {
		if err := env.Client.Delete(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
	}
	node.Spec.Taints = []corev1.Taint{{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}}
	if err := env.Client.Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	fourth, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	onNode := 0
	for _, b := range fourth.Plan.Bindings {
		if b.Node == node.Name {
			onNode++
		}
	}
	if len(fourth.Created) != 0 || onNode != 4 {
		t.Fatalf("a Ready node's stale not-ready taint hid its room: %d new claim(s), %d of 4 pods planned onto it", len(fourth.Created), onNode)
	}
}

// A static NodePool (spec.replicas) never buys machines for pending pods; a dynamic pool does.
func TestStaticNodePoolIsNotUsedForPendingPods(t *testing.T) {
	static := pool("prov-static", func(np *karpv1.NodePool) {
		np.Spec.Replicas = new(int64(2))
		np.Spec.Weight = nil
	})
	p, _ := setup(t, static)
	ns := namespace(t)
	pendingPods(t, ns, "web", 3, "250m", nil)
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 {
		t.Fatalf("a static pool bought %d claim(s) for pending pods", len(res.Created))
	}
	if len(res.Plan.Unschedulable) != 3 {
		t.Fatalf("want the three pods unschedulable with only a static pool, got %d", len(res.Plan.Unschedulable))
	}
}

// A pool's capstan.dev/node-cost annotation is part of each planned machine's price, and the
// provisioner's default applies to pools without it; a pool whose annotation is not a price is
// skipped (its status says why), not planned at a wrong cost.
func TestNodeCostAnnotationPricesThePlan(t *testing.T) {
	annotated := pool("prov-cost", func(np *karpv1.NodePool) {
		np.Annotations = map[string]string{nodepools.NodeCostAnnotationKey: "0.5"}
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	p, _ := setup(t, annotated)
	p.NodeCost = 0.25
	ns := namespace(t)
	pendingPods(t, ns, "web", 1, "500m", nil)
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.NodeClaims) != 1 {
		t.Fatalf("want one planned claim, got %d", len(res.Plan.NodeClaims))
	}
	planned := res.Plan.NodeClaims[0]
	instance := math.Inf(1)
	for _, o := range planned.InstanceTypes[0].Offerings {
		if o.Available && o.CapacityType == karpv1.CapacityTypeOnDemand {
			instance = math.Min(instance, o.Price)
		}
	}
	if math.Abs(planned.Price-(instance+0.5)) > 1e-9 {
		t.Fatalf("planned price %v, want the instance's %v plus the annotation's 0.5", planned.Price, instance)
	}

	orig := annotated.DeepCopy()
	annotated.Annotations[nodepools.NodeCostAnnotationKey] = "-1"
	if err := env.Client.Patch(t.Context(), annotated, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	for _, nc := range res.Created {
		if err := env.Client.Delete(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
	}
	res, err = p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || len(res.Plan.Unschedulable) != 1 {
		t.Fatalf("a pool with node cost \"-1\" was planned from: %d claim(s), %d pod(s) unschedulable", len(res.Created), len(res.Plan.Unschedulable))
	}
	// Without the annotation, the provisioner's default.
	orig = annotated.DeepCopy()
	delete(annotated.Annotations, nodepools.NodeCostAnnotationKey)
	if err := env.Client.Patch(t.Context(), annotated, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	res, err = p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Plan.NodeClaims) != 1 || math.Abs(res.Plan.NodeClaims[0].Price-(instance+0.25)) > 1e-9 {
		t.Fatalf("without the annotation: %d planned claim(s); want one priced %v (instance plus the default 0.25)", len(res.Plan.NodeClaims), instance+0.25)
	}
}

// Pods planned onto in-flight claims are not planned again while those claims have no Node:
// the next pass plans only the pods that came since, and a claim that goes away gives its pods
// back to planning.
func TestNominatedPodsAreNotPlannedAgain(t *testing.T) {
	np := pool("prov-nominate", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	p, _ := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "first", 6, "500m", nil)
	first, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Created) == 0 {
		t.Fatal("no claim for six pending pods")
	}
	// Nothing new: nothing to plan (the six wait for their claims).
	again, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if again.Plan != nil || len(again.Created) != 0 {
		t.Fatalf("a pass with only nominated pods planned again: %+v", again)
	}
	// Two more pods: only they are planned (onto the claims' free room or a new claim).
	pendingPods(t, ns, "second", 2, "500m", nil)
	third, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	planned := len(third.Plan.Bindings) + len(third.Plan.Unschedulable)
	for _, nc := range third.Plan.NodeClaims {
		planned += len(nc.Pods)
	}
	if planned != 2 {
		t.Fatalf("the pass after two new pods planned %d pods, want 2", planned)
	}
	// The first claims go away (a failed launch): their pods are planned again.
	for _, nc := range first.Created {
		if err := env.Client.Delete(t.Context(), nc); err != nil {
			t.Fatal(err)
		}
	}
	fourth, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	replanned := 0
	for _, nc := range fourth.Plan.NodeClaims {
		for _, pod := range nc.Pods {
			if strings.HasPrefix(pod.Name, "first-") {
				replanned++
			}
		}
	}
	for _, b := range fourth.Plan.Bindings {
		if strings.HasPrefix(b.Pod.Name, "first-") {
			replanned++
		}
	}
	if replanned != 6 {
		t.Fatalf("%d of the six pods of deleted claims planned again, want 6", replanned)
	}
}

// A disruption replacement in flight keeps its room for the pods its command moves there, while
// they still run on the node it replaces: pods that arrive meanwhile get a machine of their own,
// and the moving pods will not need a second one.
func TestReplacementRoomIsKeptForTheMovingPods(t *testing.T) {
	np := pool("prov-reserve", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	p, _ := setup(t, np)
	ns := namespace(t)
	// A claim sized for three 500m pods, standing in for a replacement.
	pendingPods(t, ns, "sizing", 3, "500m", nil)
	first, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Created) != 1 {
		t.Fatalf("want one claim for three pods, got %d", len(first.Created))
	}
	repl := first.Created[0]
	pods := &corev1.PodList{}
	if err := env.Client.List(t.Context(), pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if err := env.Client.Delete(t.Context(), &pods.Items[i], client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	// The three pods the command moves run on the node being replaced.
	var moving []*corev1.Pod
	for i := range 3 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("moving-%d", i), Namespace: ns},
			Spec: corev1.PodSpec{NodeName: "old-node", Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}}}
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		moving = append(moving, pod)
	}
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(repl), nc); err != nil {
		t.Fatal(err)
	}
	nodeclaims.ReservePods(nc, moving)
	if err := env.Client.Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	// Two pods arrive: the replacement's room is taken.
	pendingPods(t, ns, "late", 2, "500m", nil)
	second, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range second.Plan.Bindings {
		if strings.HasSuffix(b.Node, repl.Name) {
			t.Errorf("pod %s planned onto the replacement's reserved room", b.Pod.Name)
		}
	}
	if len(second.Created) != 1 {
		t.Errorf("want one new claim for the two late pods, got %d", len(second.Created))
	}
	// Once the moving pods are gone (evicted; their successors come back pending), the room is
	// the replacement's again.
	for _, pod := range moving {
		if err := env.Client.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
			t.Fatal(err)
		}
	}
	pendingPods(t, ns, "after", 2, "500m", nil)
	third, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	onReplacement := 0
	for _, b := range third.Plan.Bindings {
		if strings.HasSuffix(b.Node, repl.Name) {
			onReplacement++
		}
	}
	if len(third.Created) != 0 || onReplacement == 0 {
		t.Errorf("after the moving pods left: %d new claim(s), %d of 2 pods onto the replacement; want none and some", len(third.Created), onReplacement)
	}
}
