package autoscaling

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	"capstan.dev/capstan/internal/capacitybuffer"
)

// A CapacityBuffer of 4 × (1 CPU, 2Gi) keeps that room free: a Deployment that scales into it
// starts on nodes already there, and the room is bought again behind it; deleting the buffer lets
// consolidation take the room back.
func TestCapacityBufferKeepsRoomFree(t *testing.T) {
	const name = "e2e-buffer"
	pool(t, name, nil, nil)
	ctx := t.Context()
	tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Template: corev1.PodTemplateSpec{
		Spec: corev1.PodSpec{NodeSelector: map[string]string{poolLabel: name}, Containers: []corev1.Container{{Name: "app", Image: "pause",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}}}}}
	four := int32(4)
	cb := &autoscalingv1beta1.CapacityBuffer{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: autoscalingv1beta1.CapacityBufferSpec{PodTemplateRef: &autoscalingv1beta1.LocalObjectRef{Name: name}, Replicas: &four}}
	for _, o := range []client.Object{tmpl, cb} {
		if err := s.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Client.Delete(context.Background(), o) })
	}
	roomOnRunningNodes := func(ctx context.Context) (bool, error) {
		got := &autoscalingv1beta1.CapacityBuffer{}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(cb), got); err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, autoscalingv1beta1.ConditionProvisioning)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == capacitybuffer.ReasonFitsExistingCapacity && c.Message == "4 chunk(s) on running nodes", nil
	}
	eventually(t, "the buffer's 4 chunks on running nodes", 3*time.Minute, roomOnRunningNodes)
	before := len(claims(t, name))
	if before == 0 {
		t.Fatal("room on running nodes, yet the pool has no NodeClaim")
	}

	// Three pods take three chunks' room; the room is bought again behind them.
	deployment(t, "buffered", name, 3, "1", "1Gi", nil)
	eventually(t, "the Deployment Running", 2*time.Minute, running(t, "buffered", 3))
	eventually(t, "the buffer's room bought again", 3*time.Minute, func(ctx context.Context) (bool, error) {
		ok, err := roomOnRunningNodes(ctx)
		return ok && len(claims(t, name)) > before, err
	})
	kept := len(claims(t, name))

	// Without the buffer, the room it kept goes.
	if err := s.Client.Delete(ctx, cb); err != nil {
		t.Fatal(err)
	}
	eventually(t, "consolidation taking the buffer's room back", 4*time.Minute, func(context.Context) (bool, error) {
		return len(claims(t, name)) < kept, nil
	})
	eventually(t, "the Deployment still Running", time.Minute, running(t, "buffered", 3))
}
