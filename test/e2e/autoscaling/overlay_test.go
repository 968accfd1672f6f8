package autoscaling

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

// The savings-plan case of aws#2259 on the running cluster (the NodeOverlay gate on): c5.large
// is the nominally cheaper type for a pod of one CPU, a 25% discount on on-demand m5 in this
// pool makes m5.large cheaper, and the pod's machine is an m5.large.
func TestNodeOverlayDiscountBuysTheDiscountedFamily(t *testing.T) {
	o := &v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "e2e-savings-plan"}, Spec: v1alpha1.NodeOverlaySpec{
		Requirements: []v1alpha1.NodeSelectorRequirement{
			{Key: "karpenter.k8s.aws/instance-family", Operator: corev1.NodeSelectorOpIn, Values: []string{"m5"}},
			{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
			{Key: karpv1.NodePoolLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"e2e-overlay"}}},
		PriceAdjustment: ptr.To("-25%")}}
	if err := s.Client.Create(t.Context(), o); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), o) })
	eventually(t, "the overlay Ready", time.Minute, func(ctx context.Context) (bool, error) {
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(o.Status.Conditions, "Ready"), nil
	})
	pool(t, "e2e-overlay", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.Zones = []string{"zone-a"}
		snc.Spec.InstanceTypes = []string{"c5.large", "m5.large"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	deployment(t, "overlay", "e2e-overlay", 1, "1", "1Gi", nil)
	eventually(t, "the pod Running", 2*time.Minute, running(t, "overlay", 1))
	for _, nc := range claims(t, "e2e-overlay") {
		if it := nc.Labels[karpv1.InstanceTypeLabelKey]; it != "m5.large" {
			t.Fatalf("launched %s, want m5.large (0.072 $/h with the discount, c5.large 0.085)", it)
		}
	}
}
