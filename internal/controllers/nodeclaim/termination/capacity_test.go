package termination

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
)

// launchedFor stands in for the provisioner: once planned, every pod asked about was planned
// onto claim.
type launchedFor struct {
	claim   string
	planned bool
	asked   []types.UID
}

func (l *launchedFor) LaunchedFor(_ string, pods []types.UID) ([]string, bool) {
	l.asked = append(l.asked, pods...)
	if !l.planned {
		return nil, false
	}
	return []string{l.claim}, true
}

// launching creates a NodeClaim that has not come up: no lifecycle runs for it.
func launching(t *testing.T, name, class string) *karpv1.NodeClaim {
	t.Helper()
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: class},
			Requirements: karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}},
		}}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	simtest.CleanupClaim(t, env.Client, name)
	return nc
}

// drainedReason is the claim's Drained condition's reason and message.
func drainedReason(t *testing.T, name string) (string, string) {
	t.Helper()
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeDrained); c != nil {
		return c.Reason, c.Message
	}
	return "", ""
}

// The drain of a node whose pods provisioning launched a machine for evicts nothing until that
// machine is up: evicted earlier, the pods would wait pending for its launch. Once it has
// initialized — or once the wait's bound has passed, for a machine that never comes up — the drain
// goes on.
func TestDrainWaitsForTheMachineLaunchedForItsPods(t *testing.T) {
	for _, tc := range []struct {
		name string
		// release lets the drain go on: the machine initializes, or the clock passes the bound.
		release func(t *testing.T, f *fixture, awaited *karpv1.NodeClaim)
	}{
		{"until it initializes", func(t *testing.T, _ *fixture, awaited *karpv1.NodeClaim) {
			meta.SetStatusCondition(&awaited.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, Reason: "Initialized"})
			if err := env.Client.Status().Update(t.Context(), awaited); err != nil {
				t.Fatal(err)
			}
		}},
		{"for WaitForCapacity at most", func(_ *testing.T, f *fixture, _ *karpv1.NodeClaim) {
			f.clk.Step(WaitForCapacity)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "await-" + strings.ToLower(strings.ReplaceAll(tc.name, " ", "-"))
			f := readyClaim(t, name, time.Hour)
			awaited := launching(t, name+"-new", name)
			capacity := &launchedFor{claim: awaited.Name}
			f.ctrl.Capacity = capacity
			pod := boundPod(t, name+"-web", name, nil)
			deleteClaim(t, name)
			// Provisioning has not planned the node's pods yet: nothing is launched for them.
			f.reconcile(t, name)
			if left := kubelet(t, name); !slices.Equal(left, []string{pod.Name}) {
				t.Fatalf("pods left %v: the drain evicted before provisioning planned them", left)
			}
			if reason, msg := drainedReason(t, name); reason != "AwaitingCapacity" || !strings.Contains(msg, "provisioning has planned them") {
				t.Errorf("Drained condition %s %q, want AwaitingCapacity until provisioning has planned the pods", reason, msg)
			}
			capacity.planned = true
			f.reconcile(t, name)
			if left := kubelet(t, name); !slices.Equal(left, []string{pod.Name}) {
				t.Fatalf("pods left %v: the drain evicted before the machine launched for them was up", left)
			}
			if !slices.Contains(capacity.asked, pod.UID) {
				t.Errorf("the drain asked about %v, not the node's pod", capacity.asked)
			}
			if reason, msg := drainedReason(t, name); reason != "AwaitingCapacity" || !strings.Contains(msg, awaited.Name) {
				t.Errorf("Drained condition %s %q, want AwaitingCapacity naming %s", reason, msg, awaited.Name)
			}
			tc.release(t, f, awaited)
			f.reconcile(t, name)
			if left := kubelet(t, name); len(left) != 0 {
				t.Fatalf("pods left %v after the wait ended, want all evicted", left)
			}
		})
	}
}
