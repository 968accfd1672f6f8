package autoscaling

import (
	"context"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// A static NodePool (the StaticCapacity gate on) keeps its replica count of machines with no pod
// asking for them, and follows `kubectl scale nodepool --replicas` (the scale subresource).
func TestStaticPoolKeepsItsNodesAndScales(t *testing.T) {
	replicas := int64(2)
	np := pool(t, "e2e-static", nil, func(np *karpv1.NodePool) {
		np.Spec.Replicas = &replicas
	})
	initialized := func(n int) func(context.Context) (bool, error) {
		return func(context.Context) (bool, error) {
			count := 0
			for _, nc := range claims(t, "e2e-static") {
				if nc.DeletionTimestamp.IsZero() && meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized) {
					count++
				}
			}
			return count == n && len(claims(t, "e2e-static")) == n, nil
		}
	}
	eventually(t, "two initialized nodes", 2*time.Minute, initialized(2))
	scale := &autoscalingv1.Scale{}
	if err := s.Client.SubResource("scale").Get(t.Context(), np, scale); err != nil {
		t.Fatal(err)
	}
	if scale.Status.Replicas != 2 {
		t.Errorf("scale status %d, want 2 (status.nodes)", scale.Status.Replicas)
	}
	scale.Spec.Replicas = 1
	if err := s.Client.SubResource("scale").Update(t.Context(), np, client.WithSubResourceBody(scale)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "one node after scaling to 1", 2*time.Minute, initialized(1))
}
