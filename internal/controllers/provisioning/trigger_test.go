package provisioning

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

func TestPoolChangedOnSpecAndReadiness(t *testing.T) {
	ready := func(s metav1.ConditionStatus, gen int64) *karpv1.NodePool {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "a", Generation: gen}}
		if s != "" {
			np.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeReady, Status: s, Reason: "R"}}
		}
		return np
	}
	for _, c := range []struct {
		name     string
		old, cur *karpv1.NodePool
		want     bool
	}{
		{"no conditions yet, then Ready", ready("", 1), ready(metav1.ConditionTrue, 1), true},
		{"not Ready, then Ready", ready(metav1.ConditionFalse, 1), ready(metav1.ConditionTrue, 1), true},
		{"Ready, then not", ready(metav1.ConditionTrue, 1), ready(metav1.ConditionFalse, 1), true},
		{"spec changed", ready(metav1.ConditionTrue, 1), ready(metav1.ConditionTrue, 2), true},
		{"status only, Ready both times", ready(metav1.ConditionTrue, 1), ready(metav1.ConditionTrue, 1), false},
	} {
		if got := PoolChanged(c.old, c.cur); got != c.want {
			t.Errorf("%s: PoolChanged = %v, want %v", c.name, got, c.want)
		}
	}
}

// A pass that leaves pods unplaced is followed by another even when nothing it watches changes:
// here the NodePool that fits them appears while no trigger watches NodePools (as when the
// provisioner's cache had not yet seen a NodeClass resolve), and the recheck buys its machine.
func TestUnplacedPodsAreRecheckedWithoutATrigger(t *testing.T) {
	p, rec := setup(t)
	ns := namespace(t)
	pendingPods(t, ns, "late", 2, "500m", nil)
	fc := p.Clock.(interface{ Step(time.Duration) })

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	p.Trigger()

	// drive steps the fake clock until cond holds; the outcome does not depend on how fast.
	drive := func(what string, cond func() bool) {
		t.Helper()
		for range 3000 {
			if cond() {
				return
			}
			fc.Step(500 * time.Millisecond)
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("never: %s", what)
	}
	drive("the first pass says the pods fit nowhere", func() bool {
		select {
		case e := <-rec.Events:
			return strings.Contains(e, "FailedScheduling")
		default:
			return false
		}
	})

	np := pool("prov-late", nil)
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "prov-" + strings.ToLower(t.Name())}
	if err := env.Client.Create(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), np) })
	drive("a NodeClaim from the NodePool that appeared after the pass", func() bool { return len(claimsOf(t, "prov-late")) > 0 })
}
