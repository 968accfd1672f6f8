package provreq

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

var t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)

func request(class string, sets ...autoscalingv1.PodSet) *autoscalingv1.ProvisioningRequest {
	return &autoscalingv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: "gang", Namespace: "batch", UID: "u1", CreationTimestamp: metav1.NewTime(t0)},
		Spec: autoscalingv1.ProvisioningRequestSpec{ProvisioningClassName: class, PodSets: sets}}
}

// A request stands for count pods of each set, made from its template, each with a UID of its
// own; a template missing is named.
func TestPods(t *testing.T) {
	pr := request(autoscalingv1.ClassBestEffortAtomicScaleUp,
		autoscalingv1.PodSet{PodTemplateRef: autoscalingv1.Reference{Name: "workers"}, Count: 3},
		autoscalingv1.PodSet{PodTemplateRef: autoscalingv1.Reference{Name: "driver"}, Count: 1})
	tmpl := func(name string) *corev1.PodTemplate {
		return &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"role": name}},
			Spec:       corev1.PodSpec{NodeSelector: map[string]string{"pool": "gpu"}, Containers: []corev1.Container{{Name: "c"}}}}}
	}
	pods, err := Pods(pr, map[string]*corev1.PodTemplate{"workers": tmpl("workers"), "driver": tmpl("driver")})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 4 {
		t.Fatalf("%d pods, want 4", len(pods))
	}
	uids := map[types.UID]bool{}
	for _, p := range pods {
		uids[p.UID] = true
		if p.Namespace != "batch" || p.Spec.NodeSelector["pool"] != "gpu" || p.Status.Phase != corev1.PodPending {
			t.Fatalf("pod %+v", p.ObjectMeta)
		}
	}
	if len(uids) != 4 || pods[3].Labels["role"] != "driver" {
		t.Fatalf("uids %v, last pod's labels %v", uids, pods[3].Labels)
	}
	if _, err := Pods(pr, map[string]*corev1.PodTemplate{"workers": tmpl("workers")}); err == nil || !strings.Contains(err.Error(), "spec.podSets[1].podTemplateRef: PodTemplate batch/driver not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestValidUntil(t *testing.T) {
	pr := request(autoscalingv1.ClassBestEffortAtomicScaleUp)
	if got, err := ValidUntil(pr); err != nil || !got.IsZero() {
		t.Fatalf("no parameter: %v %v", got, err)
	}
	pr.Spec.Parameters = map[string]autoscalingv1.Parameter{autoscalingv1.ParameterValidUntilSeconds: "600"}
	if got, err := ValidUntil(pr); err != nil || !got.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("600: %v %v", got, err)
	}
	pr.Spec.Parameters[autoscalingv1.ParameterValidUntilSeconds] = "10m"
	if _, err := ValidUntil(pr); err == nil || !strings.Contains(err.Error(), `ValidUntilSeconds: "10m"`) {
		t.Fatalf("10m: %v", err)
	}
}

// A claim is booked until its annotation's time, for the request it names.
func TestBooked(t *testing.T) {
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		RequestAnnotationKey: "batch/gang", BookedUntilAnnotationKey: t0.Add(time.Minute).Format(time.RFC3339)}}}
	if req, ok := Booked(nc, t0); !ok || req != (types.NamespacedName{Namespace: "batch", Name: "gang"}) {
		t.Fatalf("Booked = %v %v", req, ok)
	}
	if _, ok := Booked(nc, t0.Add(time.Minute)); ok {
		t.Fatal("booked at its end")
	}
	nc.Annotations[BookedUntilAnnotationKey] = "soon"
	if _, ok := Booked(nc, t0); ok {
		t.Fatal("booked with an unreadable time")
	}
}

// A pod consumes the request its annotation names, in its namespace (either annotation).
func TestConsumes(t *testing.T) {
	for _, key := range []string{autoscalingv1.ConsumeAnnotationKey, autoscalingv1.LegacyConsumeAnnotationKey} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Annotations: map[string]string{key: "gang"}}}
		if req, ok := Consumes(p); !ok || req != (types.NamespacedName{Namespace: "batch", Name: "gang"}) {
			t.Fatalf("%s: %v %v", key, req, ok)
		}
	}
	if _, ok := Consumes(&corev1.Pod{}); ok {
		t.Fatal("a pod without the annotation consumes a request")
	}
}

// Only a Provisioned condition that is True starts a booking; Failed, BookingExpired and
// CapacityRevoked end the request.
func TestBookingAndDone(t *testing.T) {
	pr := request(autoscalingv1.ClassCheckCapacity)
	if !BookedUntil(pr).IsZero() || Done(pr) || !Supported(pr) {
		t.Fatal("a new request")
	}
	pr.Status.Conditions = []metav1.Condition{{Type: autoscalingv1.ConditionProvisioned, Status: metav1.ConditionTrue, LastTransitionTime: metav1.NewTime(t0)}}
	if got := BookedUntil(pr); !got.Equal(t0.Add(BookingTime)) {
		t.Fatalf("BookedUntil = %v", got)
	}
	pr.Status.Conditions = append(pr.Status.Conditions, metav1.Condition{Type: autoscalingv1.ConditionBookingExpired, Status: metav1.ConditionTrue})
	if !Done(pr) {
		t.Fatal("a request whose booking expired is not done")
	}
	if Supported(request("queued-provisioning.gke.io")) {
		t.Fatal("another autoscaler's class is answered")
	}
}

// A request is consumed once as many of its consumers as it has pods are bound: pods pending,
// being deleted, consuming another request or of another namespace do not count.
func TestConsumed(t *testing.T) {
	pr := request(autoscalingv1.ClassBestEffortAtomicScaleUp,
		autoscalingv1.PodSet{PodTemplateRef: autoscalingv1.Reference{Name: "workers"}, Count: 2},
		autoscalingv1.PodSet{PodTemplateRef: autoscalingv1.Reference{Name: "driver"}, Count: 1})
	if n := Count(pr); n != 3 {
		t.Fatalf("Count = %d, want 3", n)
	}
	pod := func(ns, consumes, node string, deleting bool) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Annotations: map[string]string{autoscalingv1.ConsumeAnnotationKey: consumes}}, Spec: corev1.PodSpec{NodeName: node}}
		if deleting {
			p.DeletionTimestamp = &metav1.Time{Time: t0}
		}
		return p
	}
	pods := []corev1.Pod{pod("batch", "gang", "n1", false), pod("batch", "gang", "n2", false),
		pod("batch", "gang", "", false), pod("batch", "gang", "n3", true), pod("batch", "other", "n1", false), pod("elsewhere", "gang", "n1", false)}
	if Consumed(pr, pods) {
		t.Fatal("consumed with 2 of 3 pods bound")
	}
	if !Consumed(pr, append(pods, pod("batch", "gang", "n4", false))) {
		t.Fatal("not consumed with 3 of 3 pods bound")
	}
}
