package capacitybuffer

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	"capstan.dev/capstan/internal/bufferstore"
	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "buffer-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	return ns.Name
}

func chunk() corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}}}}
}

func reconcileBuffer(t *testing.T, c *Controller, ns, name string) *autoscalingv1beta1.CapacityBuffer {
	t.Helper()
	if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	cb := &autoscalingv1beta1.CapacityBuffer{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, cb); err != nil {
		t.Fatal(err)
	}
	return cb
}

// A buffer over a PodTemplate resolves once the template exists, says why until then, and its
// chunks become virtual pods of the template's shape; with the gate off it says that instead.
func TestABufferResolvesItsTemplateIntoVirtualPods(t *testing.T) {
	ns := namespace(t)
	four := int32(4)
	cb := &autoscalingv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: "room", Namespace: ns},
		Spec: autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: "chunk"}, Replicas: &four}}
	if err := env.Client.Create(t.Context(), cb); err != nil {
		t.Fatal(err)
	}
	if cb.Spec.ProvisioningStrategy == nil || *cb.Spec.ProvisioningStrategy != autoscalingv1beta1.ActiveCapacity {
		t.Fatalf("the CRD's default strategy: %v", cb.Spec.ProvisioningStrategy)
	}
	triggered := 0
	c := &Controller{Client: env.Client, Clock: clocktesting.NewFakeClock(time.Now()), Enabled: true, Trigger: func() { triggered++ }}
	got := reconcileBuffer(t, c, ns, "room")
	cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1beta1.ConditionReadyForProvisioning)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != capacitybuffer.ReasonPodTemplateNotFound || got.Status.Replicas != nil {
		t.Fatalf("without its PodTemplate: %+v, replicas %v", cond, got.Status.Replicas)
	}
	if pods, err := bufferstore.Pods(t.Context(), env.Client); err != nil || len(pods) != 0 {
		t.Fatalf("virtual pods of an unresolved buffer: %d, %v", len(pods), err)
	}
	if err := env.Client.Create(t.Context(), &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "chunk", Namespace: ns}, Template: chunk()}); err != nil {
		t.Fatal(err)
	}
	got = reconcileBuffer(t, c, ns, "room")
	if !meta.IsStatusConditionTrue(got.Status.Conditions, autoscalingv1beta1.ConditionReadyForProvisioning) || got.Status.Replicas == nil || *got.Status.Replicas != 4 ||
		got.Status.PodTemplateRef == nil || got.Status.PodTemplateRef.Name != "chunk" || triggered == 0 {
		t.Fatalf("resolved: %+v (provisioner woken %d times)", got.Status, triggered)
	}
	pods, err := bufferstore.Pods(t.Context(), env.Client)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 4 || !capacitybuffer.IsVirtual(pods[0]) || pods[0].Namespace != ns || pods[0].Spec.Containers[0].Resources.Requests.Cpu().String() != "1" ||
		capacitybuffer.Key(pods[0]).Name != "room" || pods[0].UID == pods[1].UID {
		t.Fatalf("virtual pods %+v", pods)
	}

	off := &Controller{Client: env.Client, Clock: c.Clock, Enabled: false}
	got = reconcileBuffer(t, off, ns, "room")
	if cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1beta1.ConditionReadyForProvisioning); cond.Status != metav1.ConditionFalse || cond.Reason != capacitybuffer.ReasonFeatureGateDisabled {
		t.Fatalf("gate off: %+v", cond)
	}
	if cond := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1beta1.ConditionProvisioning); cond == nil || cond.Status != metav1.ConditionFalse ||
		cond.Reason != capacitybuffer.ReasonNotReadyForProvisioning {
		t.Fatalf("gate off, Provisioning: %+v", cond)
	}
	if pods, _ := bufferstore.Pods(t.Context(), env.Client); len(pods) != 0 {
		t.Fatalf("gate off: %d virtual pods", len(pods))
	}
}

// A buffer over a Deployment keeps a percentage of its replicas, following its scale.
func TestABufferFollowsItsWorkloadsScale(t *testing.T) {
	ns := namespace(t)
	ten := int32(10)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: appsv1.DeploymentSpec{Replicas: &ten,
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Template: chunk()}}
	if err := env.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	pct := int32(20)
	cb := &autoscalingv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: "headroom", Namespace: ns},
		Spec: autoscalingv1beta1.CapacityBufferSpec{ScalableRef: &autoscalingv1beta1.ScalableRef{APIGroup: "apps", Kind: "Deployment", Name: "web"}, Percentage: &pct}}
	if err := env.Client.Create(t.Context(), cb); err != nil {
		t.Fatal(err)
	}
	c := &Controller{Client: env.Client, Clock: clocktesting.NewFakeClock(time.Now()), Enabled: true}
	if got := reconcileBuffer(t, c, ns, "headroom"); got.Status.Replicas == nil || *got.Status.Replicas != 2 {
		t.Fatalf("20%% of 10: %v", got.Status.Replicas)
	}
	orig := d.DeepCopy()
	thirty := int32(30)
	d.Spec.Replicas = &thirty
	if err := env.Client.Patch(t.Context(), d, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	if got := reconcileBuffer(t, c, ns, "headroom"); *got.Status.Replicas != 6 {
		t.Fatalf("20%% of 30: %v", *got.Status.Replicas)
	}
	if reqs := c.naming("apps", "Deployment")(t.Context(), d); len(reqs) != 1 || reqs[0].Name != "headroom" {
		t.Fatalf("a Deployment change requeues %v", reqs)
	}
}
