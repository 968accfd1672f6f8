package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// pinned names the pods planned onto each claim, as the provisioner does.
type pinned map[string][]types.NamespacedName

func (p pinned) PodsNominatedTo(claim string) []types.NamespacedName { return p[claim] }

// objectEvents records each event with the name of the object it regards.
type objectEvents struct {
	mu  sync.Mutex
	got []string
}

func (r *objectEvents) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := ""
	if o, ok := regarding.(client.Object); ok {
		name = o.GetName()
	}
	r.got = append(r.got, name+" "+reason+" "+fmt.Sprintf(note, args...))
}

// A claim that meets insufficient capacity tells the pods planned onto it that are still waiting;
// a pod bound elsewhere meanwhile is not told.
func TestInsufficientCapacityIsToldToTheNominatedPods(t *testing.T) {
	f := setup(t, "ice-pods", simv1alpha1.Failures{InsufficientCapacity: []simv1alpha1.OfferingSelector{{CapacityType: "on-demand"}}})
	rec := &objectEvents{}
	f.ctrl.Recorder = rec
	var keys []types.NamespacedName
	for _, name := range []string{"ice-waiting", "ice-bound"} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if name == "ice-bound" {
			pod.Spec.NodeName = "elsewhere"
		}
		if err := env.Client.Create(t.Context(), pod); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod, client.GracePeriodSeconds(0)) })
		keys = append(keys, client.ObjectKeyFromObject(pod))
	}
	f.ctrl.Nominated = pinned{"ice-pods-1": keys}
	newClaim(t, "ice-pods-1", "ice-pods")
	if nc := f.reconcile(t, "ice-pods-1"); nc.DeletionTimestamp.IsZero() {
		t.Fatal("claim not deleted after insufficient capacity")
	}
	var told []string
	for _, e := range rec.got {
		if strings.Contains(e, "InsufficientCapacityError NodeClaim ice-pods-1 nominated for this pod failed to launch") {
			told = append(told, strings.Fields(e)[0])
		}
	}
	if !slices.Equal(told, []string{"ice-waiting"}) {
		t.Fatalf("pods told %v, want ice-waiting alone; events %q", told, rec.got)
	}
}
