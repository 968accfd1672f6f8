package provisioning

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr/funcr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/bufferstore"
	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/defaultspread"
)

// failingCreates fails the creation of NodeClaims whose pool is named in fail.
type failingCreates struct {
	client.Client
	fail string
}

func (f failingCreates) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if nc, ok := obj.(*karpv1.NodeClaim); ok && nc.Labels[karpv1.NodePoolLabelKey] == f.fail {
		return errors.New("injected create failure")
	}
	return f.Client.Create(ctx, obj, opts...)
}

// Claims are created concurrently; one failing creation does not stop the others, and the pass
// reports it, in its error and in one log line with the counts.
func TestOneFailedCreationDoesNotStopTheOthers(t *testing.T) {
	good := pool("prov-good", nil)
	bad := pool("prov-bad", func(np *karpv1.NodePool) { np.Spec.Weight = new(int32(50)) })
	p, rec := setup(t, good, bad)
	ns := namespace(t)
	pendingPods(t, ns, "any", 6, "250m", oneHostPerPod("any"))
	pendingPods(t, ns, "pinned", 3, "250m", func(pod *corev1.Pod) {
		oneHostPerPod("pinned")(pod)
		pod.Spec.NodeSelector = map[string]string{karpv1.NodePoolLabelKey: "prov-good"}
	})
	// One pod fits no pool: it is told so although the pass fails.
	pendingPods(t, ns, "huge", 1, "1000", nil)
	p.Client = failingCreates{Client: p.Client, fail: "prov-bad"}
	var mu sync.Mutex
	var lines []string
	logger := funcr.New(func(_, args string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, args)
	}, funcr.Options{})
	res, err := p.Provision(log.IntoContext(t.Context(), logger))
	if err == nil || !strings.Contains(err.Error(), "injected create failure") {
		t.Fatalf("err = %v, want the injected failure reported", err)
	}
	if n := len(claimsOf(t, "prov-good")); n != 3 || len(res.Created) != 3 {
		t.Fatalf("%d claims on the good pool (%d reported), want the 3 pinned pods' claims created despite the failures", n, len(res.Created))
	}
	mu.Lock()
	defer mu.Unlock()
	summaries := 0
	for _, l := range lines {
		if strings.Contains(l, `"msg"="created nodeclaims"`) {
			summaries++
			if !strings.Contains(l, `"created"=3 "failed"=6 "pods"=3`) {
				t.Errorf("summary line %s, want 3 created, 6 failed, 3 pods", l)
			}
		}
	}
	if summaries != 1 {
		t.Errorf("%d summary lines, want 1 for the pass; lines: %v", summaries, lines)
	}
	failedScheduling := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "FailedScheduling") && strings.Contains(e, "no instance type has cpu 1k") {
			failedScheduling++
		}
	}
	if failedScheduling != 1 {
		t.Errorf("%d FailedScheduling events for the pod that fits nowhere, want 1 despite the failed creates", failedScheduling)
	}
}

// A pod with Dynamic Resource Allocation requirements buys nothing and is told why, once in the
// log; the pods beside it are planned as usual.
func TestPodsWithDRARequirementsAreLeftToTheScheduler(t *testing.T) {
	p, rec := setup(t, pool("prov-dra", nil))
	ns := namespace(t)
	pendingPods(t, ns, "gpu", 1, "1", func(pod *corev1.Pod) {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptrTo("gpu")}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	})
	pendingPods(t, ns, "web", 1, "1", nil)
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 1 || len(res.Plan.NodeClaims[0].Pods) != 1 || res.Plan.NodeClaims[0].Pods[0].Name != "web-0" {
		t.Fatalf("created %d claims for %v, want one for web-0 alone", len(res.Created), res.Plan.NodeClaims)
	}
	var told bool
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "FailedScheduling") && strings.Contains(e, "Dynamic Resource Allocation") {
			told = true
		}
	}
	if !told {
		t.Fatal("no FailedScheduling event on the DRA pod")
	}
	if p.unschedulable == nil || len(p.unschedulable) != 1 {
		t.Fatalf("remembered answers %v, want the DRA pod's (its log line written once)", p.unschedulable)
	}
}

func ptrTo[T any](v T) *T { return &v }

// With the kube-scheduler's default constraint spreading by zone (SCHEDULER_CONFIG), a
// ReplicaSet's pods without constraints of their own are planned across the zones, as the
// scheduler will place them; without it, on one machine.
func TestDefaultTopologySpreadIsPlannedAsTheSchedulerApplies(t *testing.T) {
	p, _ := setup(t, pool("prov-spread", nil))
	ns := namespace(t)
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.ReplicaSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
	if err := env.Client.Create(t.Context(), rs); err != nil {
		t.Fatal(err)
	}
	pendingPods(t, ns, "web", 9, "500m", func(pod *corev1.Pod) {
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptrTo(true)}}
	})
	zones := func() map[string]int {
		t.Helper()
		res, err := p.Provision(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, nc := range res.Plan.NodeClaims {
			out[nc.Requirements.Labels()[corev1.LabelTopologyZone]] += len(nc.Pods)
		}
		return out
	}
	p.DefaultSpread = &defaultspread.Applier{Reader: env.Client, Constraints: []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule}}}
	got := zones()
	if len(got) != 2 || got["zone-a"]+got["zone-b"] != 9 || got["zone-a"]-got["zone-b"] > 1 || got["zone-b"]-got["zone-a"] > 1 {
		t.Fatalf("pods per zone %v, want 9 spread over zone-a and zone-b within a skew of 1", got)
	}
}

// A CapacityBuffer's chunks are planned like pending pods: machines are bought for them, the
// buffer says so on Provisioning, and no event is sent to pods that do not exist.
func TestCapacityBufferChunksBuyRoom(t *testing.T) {
	p, rec := setup(t, pool("prov-buffer", nil))
	ns := namespace(t)
	tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chunk", Namespace: ns}, Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}}}}}
	if err := env.Client.Create(t.Context(), tmpl); err != nil {
		t.Fatal(err)
	}
	four := int32(4)
	cb := &autoscalingv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: "room", Namespace: ns},
		Spec: autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "chunk"}, Replicas: &four}}
	if err := env.Client.Create(t.Context(), cb); err != nil {
		t.Fatal(err)
	}
	cb.Status.Replicas = &four
	cb.Status.Conditions = []metav1.Condition{{Type: autoscalingv1beta1.ConditionReadyForProvisioning, Status: metav1.ConditionTrue, Reason: "Resolved", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(t.Context(), cb); err != nil {
		t.Fatal(err)
	}
	// A second buffer whose chunk mounts a claim that does not exist: left out, and no event.
	withVolume := tmpl.DeepCopy()
	withVolume.ObjectMeta = metav1.ObjectMeta{Name: "chunk-with-volume", Namespace: ns}
	withVolume.Template.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "missing"}}}}
	if err := env.Client.Create(t.Context(), withVolume); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	cb2 := &autoscalingv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: "stored", Namespace: ns},
		Spec: autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "chunk-with-volume"}, Replicas: &one}}
	if err := env.Client.Create(t.Context(), cb2); err != nil {
		t.Fatal(err)
	}
	cb2.Status.Replicas = &one
	cb2.Status.Conditions = cb.Status.Conditions
	if err := env.Client.Status().Update(t.Context(), cb2); err != nil {
		t.Fatal(err)
	}
	p.Buffers = func(ctx context.Context) ([]*corev1.Pod, error) { return bufferstore.Pods(ctx, env.Client) }
	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	chunks := 0
	for _, nc := range res.Plan.NodeClaims {
		chunks += len(nc.Pods)
	}
	if len(res.Created) == 0 || chunks != 4 || res.Buffered != 5 {
		t.Fatalf("created %d claims for %d chunks (buffered %d), want room for 4 (the chunk with a missing volume left out)", len(res.Created), chunks, res.Buffered)
	}
	got := &autoscalingv1beta1.CapacityBuffer{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(cb), got); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1beta1.ConditionProvisioning)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != capacitybuffer.ReasonRequiresNewCapacity {
		t.Fatalf("Provisioning %+v, want True/RequiresNewCapacity", cond)
	}
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "room-buffer") || strings.Contains(e, "Nominated") || strings.Contains(e, "missing") {
			t.Errorf("an event for a virtual pod: %s", e)
		}
	}
	// The next pass finds them waiting on the claims being launched: nothing bought twice.
	again, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Created) != 0 {
		t.Fatalf("a second pass bought %d more claims for the same chunks", len(again.Created))
	}
}
