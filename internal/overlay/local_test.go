package overlay_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/overlay"
	"capstan.dev/capstan/internal/scheme"
)

// kubectl capstan reads prices as Capstan's decisions do: with the NodeOverlays Capstan applies
// (those carrying its Ready condition), and without them while Capstan does not evaluate them.
func TestLocalAppliesTheOverlaysCapstanEvaluates(t *testing.T) {
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: 1},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: simv1alpha1.SimNodeClassKind, Name: "default"}
	o := &v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "flat"}, Spec: v1alpha1.NodeOverlaySpec{Price: ptr.To("0.01")}}
	price := func(ready *metav1.Condition) float64 {
		t.Helper()
		ov := o.DeepCopy()
		if ready != nil {
			ov.Status.Conditions = []metav1.Condition{*ready}
		}
		c := fake.NewClientBuilder().WithScheme(s).WithObjects(snc.DeepCopy(), np.DeepCopy(), ov).WithStatusSubresource(ov).Build()
		clk := clocktesting.NewFakeClock(time.Now())
		p, err := sim.NewProvider(c, sim.NewCloudWithStore(clk, nil), clk, unavailable.New(clk, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		cloud, err := overlay.Local(t.Context(), c, p)
		if err != nil {
			t.Fatal(err)
		}
		its, err := cloud.GetInstanceTypes(t.Context(), np)
		if err != nil || len(its) != 1 {
			t.Fatalf("%v, %v", its, err)
		}
		for _, of := range its[0].Offerings {
			if of.CapacityType == karpv1.CapacityTypeOnDemand {
				return of.Price
			}
		}
		t.Fatalf("no on-demand offering: %v", its[0].Offerings)
		return 0
	}
	if got := price(&metav1.Condition{Type: overlay.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}); got != 0.01 {
		t.Errorf("evaluated overlay: m5.large %v, want 0.01", got)
	}
	if got := price(nil); got == 0.01 {
		t.Errorf("an overlay Capstan never saw changed the price")
	}
	if got := price(&metav1.Condition{Type: overlay.ConditionReady, Status: metav1.ConditionFalse, Reason: overlay.ReasonFeatureGateDisabled, LastTransitionTime: metav1.Now()}); got == 0.01 {
		t.Errorf("an overlay Capstan ignores (gate off) changed the price")
	}
}
