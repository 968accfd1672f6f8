package provisioning

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Karpenter v1.15's regression spec "should account for LimitRange DefaultRequest on daemonSet
// pods for resources": the DaemonSet's template asks no CPU, but its namespace's LimitRange gives
// each of its pods 2, so the machine bought for a 2-CPU pod must hold 4 CPU (and more: allocatable
// is less than a type's vCPUs). Before, the claim asked 2 CPU and a 4-vCPU machine was bought,
// which the DaemonSet's pod then filled.
func TestLimitRangeDefaultsAreChargedAsDaemonSetOverhead(t *testing.T) {
	np := pool("prov-limitrange", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	p, _ := setup(t, np)
	ns := namespace(t)
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			DefaultRequest: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}
	labels := map[string]string{"app": "agent"}
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Spec: appsv1.DaemonSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "agent", Image: "x", Resources: corev1.ResourceRequirements{
				Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}}}
	for _, o := range []client.Object{lr, ds} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	pendingPods(t, ns, "app", 1, "2", nil)

	res, err := p.Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 1 {
		t.Fatalf("created %d claims, want 1", len(res.Created))
	}
	got := res.Created[0].Spec.Resources.Requests[corev1.ResourceCPU]
	if want := resource.MustParse("4"); got.Cmp(want) != 0 {
		t.Fatalf("the claim asks cpu %s, want %s: the pod's 2 and the DaemonSet pod's 2 from its LimitRange", got.String(), want.String())
	}
}
