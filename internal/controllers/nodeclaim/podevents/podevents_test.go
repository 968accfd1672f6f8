package podevents

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestLastPodEventTimeIsStampedAndDeduplicated(t *testing.T) {
	const pid = "sim:///zone-a/i-podevents"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "podevents-node"}, Spec: corev1.NodeSpec{ProviderID: pid}}
	if err := env.Client.Create(t.Context(), node); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "podevents"},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "x"}, Requirements: karpv1.Requirements{}}}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), nc) })
	nc.Status.ProviderID = pid
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	c := &Controller{Client: env.Client, Clock: clk}
	stamp := func() (time.Time, time.Duration) {
		t.Helper()
		res, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: node.Name}})
		if err != nil {
			t.Fatal(err)
		}
		got := &karpv1.NodeClaim{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "podevents"}, got); err != nil {
			t.Fatal(err)
		}
		return got.Status.LastPodEventTime.Time.UTC(), res.RequeueAfter
	}
	if got, _ := stamp(); !got.Equal(start) {
		t.Fatalf("lastPodEventTime %v, want %v", got, start)
	}
	clk.Step(2 * time.Second)
	if got, wait := stamp(); !got.Equal(start) || wait != 3*time.Second {
		t.Fatalf("within the dedupe window: %v, requeue %v; want unchanged, 3s", got, wait)
	}
	clk.Step(4 * time.Second)
	if got, _ := stamp(); !got.Equal(start.Add(6 * time.Second)) {
		t.Fatalf("after the window: %v", got)
	}
}
