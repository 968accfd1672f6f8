package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/registration"
)

// Two launches of a pool that do not register make it NodeRegistrationHealthy=False, naming
// why; once its NodeClass is fixed, one node that registers makes it True.
func TestPoolWhoseNodesNeverRegisterTurnsUnhealthyAndHeals(t *testing.T) {
	f := setup(t, "reghealth", simv1alpha1.Failures{NeverRegister: []simv1alpha1.OfferingSelector{{}}})
	f.ctrl.Health = &registration.Tracker{}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "reghealth"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "reghealth"}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	claim := func(name string) {
		t.Helper()
		newClaim(t, name, "reghealth")
		nc := &karpv1.NodeClaim{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
			t.Fatal(err)
		}
		orig := nc.DeepCopy()
		nc.Labels[karpv1.NodePoolLabelKey] = np.Name
		nc.OwnerReferences = []metav1.OwnerReference{{APIVersion: karpv1.SchemeGroupVersion.String(), Kind: "NodePool", Name: np.Name, UID: np.UID}}
		if err := env.Client.Patch(t.Context(), nc, client.MergeFrom(orig)); err != nil {
			t.Fatal(err)
		}
	}
	health := func() *metav1.Condition {
		t.Helper()
		got := &karpv1.NodePool{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(np), got); err != nil {
			t.Fatal(err)
		}
		return meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy)
	}

	claim("reghealth-1")
	claim("reghealth-2")
	f.reconcile(t, "reghealth-1")
	f.reconcile(t, "reghealth-2")
	f.clk.Step(RegistrationTTL + time.Second)
	if err := f.joiner.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, "reghealth-1")
	if c := health(); c != nil {
		t.Fatalf("one failed registration set %+v", c)
	}
	f.reconcile(t, "reghealth-2")
	c := health()
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonRegistrationFailed || !strings.Contains(c.Message, "did not register within 15m0s") {
		t.Fatalf("after two failed registrations: %+v, want False/RegistrationFailed", c)
	}

	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "reghealth"}, snc); err != nil {
		t.Fatal(err)
	}
	snc.Spec.Failures = simv1alpha1.Failures{}
	if err := env.Client.Update(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	// The next claim is created now by the API server's clock: launch timeouts count from there.
	f.clk.SetTime(time.Now())
	claim("reghealth-3")
	f.reconcile(t, "reghealth-3")
	f.clk.Step(3 * time.Second) // the simulated boot
	if err := f.joiner.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if nc := f.reconcile(t, "reghealth-3"); !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeRegistered) {
		t.Fatalf("the fixed class's node did not register: %v", nc.Status.Conditions)
	}
	if c := health(); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("after a registration: %+v, want True", c)
	}
}
