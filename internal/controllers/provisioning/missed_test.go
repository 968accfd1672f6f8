package provisioning

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/planning"
)

// cameUp registers a Node for the claim, as the lifecycle would once its machine runs, with an
// m5.large's allocatable; filler, when not empty, is a pod bound there without the scheduler,
// asking that much CPU — room the plan could not know would be taken.
func cameUp(t *testing.T, ns string, nc *karpv1.NodeClaim, filler string) {
	t.Helper()
	ctx := t.Context()
	nc.Status.ProviderID = "sim:///" + nc.Name
	if err := env.Client.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nc.Name, Labels: map[string]string{karpv1.NodePoolLabelKey: nc.Labels[karpv1.NodePoolLabelKey]}},
		Spec: corev1.NodeSpec{ProviderID: nc.Status.ProviderID}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1930m"), corev1.ResourceMemory: resource.MustParse("7Gi"),
		corev1.ResourcePods: resource.MustParse("29")}
	node.Status.Capacity = node.Status.Allocatable
	if err := env.Client.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), node) })
	if filler == "" {
		return
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler-" + nc.Name, Namespace: ns}, Spec: corev1.PodSpec{NodeName: node.Name,
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(filler)}}}}}}
	if err := env.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
}

// m5LargePool is a pool of on-demand m5.large machines only: cameUp's node is one.
func m5LargePool(name string) *karpv1.NodePool {
	return pool(name, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{
			{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}},
			{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large"}}}
	})
}

// heldEvents drains the recorder and returns its LaunchHeld events.
func heldEvents(rec *events.FakeRecorder) []string {
	var out []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, LaunchHeldReason) {
			out = append(out, e)
		}
	}
	return out
}

func missedOn(t *testing.T, ns, name string) string {
	t.Helper()
	pod := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		t.Fatal(err)
	}
	return pod.Annotations[planning.MissedAnnotationKey]
}

// The runaway guard: a pod whose machine came up and did not take it (here something bound
// without the scheduler takes the room) gets one more machine, then no more — the hold is told by
// an event and kept on the pod, so a restarted provisioner keeps it — until an input of the plan
// changes (here the NodePool). Before the guard, each pass bought another machine for good.
func TestAPodItsMachinesCameUpWithoutGetsOneMoreThenWaits(t *testing.T) {
	np := m5LargePool("prov-missed")
	p, rec := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "app", 1, "1", nil)

	provision := func(p *Provisioner) []*karpv1.NodeClaim {
		t.Helper()
		res, err := p.Provision(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return res.Created
	}
	first := provision(p)
	if len(first) != 1 {
		t.Fatalf("created %d claims for one pod, want 1", len(first))
	}
	cameUp(t, ns, first[0], "1500m")
	second := provision(p)
	if len(second) != 1 {
		t.Fatalf("after its machine came up without it, the pod got %d claims, want one more attempt", len(second))
	}
	if got := missedOn(t, ns, "app-0"); !strings.HasSuffix(got, ":"+first[0].Name) {
		t.Fatalf("annotation %q, want the first claim recorded before the second is bought", got)
	}
	if held := heldEvents(rec); len(held) != 0 {
		t.Fatalf("held after one miss: %q", held)
	}

	cameUp(t, ns, second[0], "1500m")
	for i := range 3 {
		if again := provision(p); len(again) != 0 {
			t.Fatalf("pass %d after both machines came up without the pod created %d more claims, want none", i, len(again))
		}
	}
	held := heldEvents(rec)
	if len(held) == 0 || !strings.Contains(held[0], "nodeclaim/"+first[0].Name+", nodeclaim/"+second[0].Name) {
		t.Fatalf("LaunchHeld events %q, want one naming both claims", held)
	}
	if got := missedOn(t, ns, "app-0"); !strings.HasSuffix(got, ":"+first[0].Name+","+second[0].Name) {
		t.Fatalf("annotation %q, want both claims", got)
	}

	restarted := &Provisioner{Client: p.Client, Cloud: p.Cloud, Clock: p.Clock, Recorder: p.Recorder}
	if again := provision(restarted); len(again) != 0 {
		t.Fatalf("a restarted provisioner created %d claims for the held pod, want none", len(again))
	}

	current := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(np), current); err != nil {
		t.Fatal(err)
	}
	current.Spec.Template.ObjectMeta.Labels = map[string]string{"fixed": "true"}
	if err := env.Client.Update(t.Context(), current); err != nil {
		t.Fatal(err)
	}
	if again := provision(restarted); len(again) != 1 {
		t.Fatalf("after the NodePool changed, the pod got %d claims, want the hold lifted", len(again))
	}
}

// A machine that came up before the scheduler bound its pod is the common case, not a miss: the
// pod fits on it, nothing more is bought and nothing is written on the pod.
func TestAPodNotBoundYetToItsMachineIsNoMiss(t *testing.T) {
	np := m5LargePool("prov-notyet")
	p, rec := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "app", 1, "1", nil)
	res, err := p.Provision(t.Context())
	if err != nil || len(res.Created) != 1 {
		t.Fatalf("first pass: %v, %v", res, err)
	}
	cameUp(t, ns, res.Created[0], "")
	for range 2 {
		res, err := p.Provision(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Created) != 0 {
			t.Fatalf("the pod's machine is up with room for it; %d more claims created", len(res.Created))
		}
	}
	if got := missedOn(t, ns, "app-0"); got != "" {
		t.Fatalf("annotation %q on a pod that fits its machine, want none", got)
	}
	if held := heldEvents(rec); len(held) != 0 {
		t.Fatalf("LaunchHeld events %q, want none", held)
	}
}

// bind binds a pending pod to a node, as the kube-scheduler does.
func bind(t *testing.T, ns, pod, node string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}}
	b := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: pod}, Target: corev1.ObjectReference{Kind: "Node", Name: node}}
	if err := env.Client.SubResource("binding").Create(t.Context(), p, b); err != nil {
		t.Fatal(err)
	}
}

// A burst's competition is no miss: the kube-scheduler, which does not know which pod each
// machine was bought for, gives the room of the pod's machines to other pods Capstan saw pending
// (rivals, each planned onto a machine of its own). The pod is planned again each time — onto the
// machine a rival left, then onto a new one — and never held; nothing is written on it.
func TestAMachineTakenByAnotherPendingPodIsNoMiss(t *testing.T) {
	np := m5LargePool("prov-rivals")
	p, rec := setup(t, np)
	ns := namespace(t)
	pendingPods(t, ns, "app", 1, "1", nil)
	pendingPods(t, ns, "rival", 3, "1500m", nil)
	app := &corev1.Pod{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app-0"}, app); err != nil {
		t.Fatal(err)
	}
	claims := map[string]*karpv1.NodeClaim{}
	provision := func() *Result {
		t.Helper()
		res, err := p.Provision(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, nc := range res.Created {
			claims[nc.Name] = nc
		}
		return res
	}
	nominatedTo := func(name string) string {
		t.Helper()
		pod := &corev1.Pod{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
			t.Fatal(err)
		}
		p.nominatedMu.Lock()
		defer p.nominatedMu.Unlock()
		return p.nominated[pod.UID].claim
	}
	provision()
	for i := range 3 {
		// The machine the app's pod is planned onto comes up, and a rival is bound there; the
		// rival's own machine is given back, so the app's pod needs a new one.
		mine, rival := nominatedTo("app-0"), fmt.Sprintf("rival-%d", i)
		theirs := nominatedTo(rival)
		if claims[mine] == nil || claims[theirs] == nil {
			t.Fatalf("round %d: the pods are planned onto %q and %q, not claims of this test", i, mine, theirs)
		}
		cameUp(t, ns, claims[mine], "")
		bind(t, ns, rival, mine)
		if err := env.Client.Delete(t.Context(), claims[theirs]); err != nil {
			t.Fatal(err)
		}
		if res := provision(); len(res.Created) != 1 {
			t.Fatalf("round %d: %d claims created, want one more for the app's pod", i, len(res.Created))
		}
	}
	p.nominatedMu.Lock()
	_, planned := p.nominated[app.UID]
	p.nominatedMu.Unlock()
	if !planned {
		t.Fatal("after three machines went to rivals the app's pod is planned nowhere")
	}
	if held := heldEvents(rec); len(held) != 0 {
		t.Fatalf("LaunchHeld events %q for a pod whose machines went to pods Capstan planned too, want none", held)
	}
	if got := missedOn(t, ns, "app-0"); got != "" {
		t.Fatalf("annotation %q, want none", got)
	}
}
