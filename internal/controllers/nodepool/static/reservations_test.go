package static

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// reserve gives the pool's SimNodeClass (made by setup: m5.large in zone-a) a capacity
// reservation of count m5.large machines in zone-a.
func (f *fixture) reserve(id string, count int32) {
	f.t.Helper()
	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(f.t.Context(), client.ObjectKey{Name: f.np.Spec.Template.Spec.NodeClassRef.Name}, snc); err != nil {
		f.t.Fatal(err)
	}
	snc.Spec.CapacityReservations = append(snc.Spec.CapacityReservations,
		simv1alpha1.SimCapacityReservation{ID: id, InstanceType: "m5.large", Zone: "zone-a", Count: count})
	if err := env.Client.Update(f.t.Context(), snc); err != nil {
		f.t.Fatal(err)
	}
}

// capacityTypes makes the pool's template allow these capacity types only.
func capacityTypes(types ...string) func(*karpv1.NodePool) {
	return func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
			Operator: karpv1.NodeSelectorOpIn, Values: types}}
	}
}

// pinned counts the claims pinned to each reservation, and the claims kept off reserved capacity.
func pinned(claims []karpv1.NodeClaim) (map[string]int, int) {
	held, off := map[string]int{}, 0
	for i := range claims {
		if id := cloudprovider.PinnedReservation(&claims[i]); id != "" {
			held[id]++
			continue
		}
		for _, r := range claims[i].Spec.Requirements {
			if r.Key == karpv1.CapacityTypeLabelKey && slices.Contains(r.Values, karpv1.CapacityTypeReserved) == (r.Operator == karpv1.NodeSelectorOpNotIn) {
				off++
			}
		}
	}
	return held, off
}

// expectEvent reads the recorder's events until one has every fragment.
func (f *fixture) expectEvent(fragments ...string) {
	f.t.Helper()
	for {
		select {
		case e := <-f.rec.Events:
			if !slices.ContainsFunc(fragments, func(s string) bool { return !strings.Contains(e, s) }) {
				return
			}
		default:
			f.t.Fatalf("no event with %q", fragments)
		}
	}
}

// A static pool whose template allows reserved capacity launches into its capacity reservations
// (the use Karpenter's static pools are made for: a fixed fleet on bought capacity), each claim
// pinned to one reservation's machine, and no more claims than the reservation has machines left
// once every pool's claims pinned to it are counted; the rest launch on the other capacity types
// the template allows, kept off reserved capacity.
func TestStaticPoolLaunchesIntoItsCapacityReservations(t *testing.T) {
	f := setup(t, 3, capacityTypes(karpv1.CapacityTypeReserved, karpv1.CapacityTypeOnDemand))
	f.reserve("cr-static1", 3)
	// Another pool's claim holds one of the reservation's three machines.
	other := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: f.np.Name + "-other", Labels: map[string]string{karpv1.NodePoolLabelKey: f.np.Name + "-other"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: f.np.Spec.Template.Spec.NodeClassRef, Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: cloudprovider.ReservationIDLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"cr-static1"}}}}}
	if err := env.Client.Create(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(t.Context(), other) })

	f.reconcile()
	claims := f.claims()
	held, off := pinned(claims)
	if len(claims) != 3 || held["cr-static1"] != 2 || off != 1 {
		t.Fatalf("%d claims, %v pinned, %d kept off reserved capacity: want 3, the reservation's 2 machines left, 1", len(claims), held, off)
	}
	for _, nc := range claims {
		if cloudprovider.PinnedReservation(&nc) == "" {
			continue
		}
		want := map[string]string{karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeReserved, karpv1.ZoneLabelKey: "zone-a", karpv1.InstanceTypeLabelKey: "m5.large"}
		for _, r := range nc.Spec.Requirements {
			if v, ok := want[r.Key]; ok && r.Operator == karpv1.NodeSelectorOpIn && slices.Equal(r.Values, []string{v}) {
				delete(want, r.Key)
			}
		}
		if len(want) != 0 {
			t.Errorf("claim %s pinned without %v in its requirements: %v", nc.Name, want, nc.Spec.Requirements)
		}
	}

	// The other pool's claim goes, and the pool grows by one: the freed machine is its.
	if err := env.Client.Delete(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	f.setReplicas(4)
	f.reconcile()
	if held, off := pinned(f.claims()); held["cr-static1"] != 3 || off != 1 {
		t.Fatalf("after growing to 4: %v pinned, %d off reserved capacity; want 3 and 1", held, off)
	}
}

// A static pool that may run only on reserved capacity creates no claim its reservations have no
// machine for (it would only fail to launch, again and again): it says so, and launches when a
// machine is free.
func TestReservedOnlyStaticPoolWaitsForAMachine(t *testing.T) {
	f := setup(t, 2, capacityTypes(karpv1.CapacityTypeReserved))
	f.reserve("cr-static2", 1)
	f.reconcile()
	claims := f.claims()
	if held, _ := pinned(claims); len(claims) != 1 || held["cr-static2"] != 1 {
		t.Fatalf("%d claims, %v pinned: want the reservation's one machine", len(claims), held)
	}
	f.expectEvent(EventReservationsFull, "1 more node(s)")
	f.reconcile()
	if n := len(f.claims()); n != 1 {
		t.Fatalf("%d claims after a second pass, want 1", n)
	}
	f.reserve("cr-static3", 1)
	f.reconcile()
	if held, _ := pinned(f.claims()); held["cr-static2"] != 1 || held["cr-static3"] != 1 {
		t.Fatalf("%v pinned: want one claim in each reservation", held)
	}
}

// A drifted node holding a reservation's machine, in a pool that may launch only there: with
// TerminateFirstDrift it is deleted first and its machine refilled once it is gone; without the
// gate it stays and its replacement waits for a machine.
func TestDriftedReservedStaticNodeTerminatesFirstWithTheGate(t *testing.T) {
	for _, gate := range []bool{false, true} {
		t.Run(map[bool]string{false: "gate-off", true: "gate-on"}[gate], func(t *testing.T) {
			f := setup(t, 1, capacityTypes(karpv1.CapacityTypeReserved))
			f.ctl.TerminateFirstDrift = gate
			f.reserve("cr-drift"+map[bool]string{false: "0", true: "1"}[gate], 1)
			f.reconcile()
			old := f.claims()[0]
			f.launched(old, true, true)
			f.reconcile()
			claims := f.claims()
			if !gate {
				if len(claims) != 1 || claims[0].Name != old.Name {
					t.Fatalf("%v: want the drifted claim alone, waiting", names(claims))
				}
				f.expectEvent("DisruptionBlocked", "capacity reservations are full")
				return
			}
			if len(claims) != 0 {
				t.Fatalf("%v: want the drifted claim deleted first", names(claims))
			}
			// Being deleted, it still holds the machine: nothing is launched until it is gone.
			f.reconcile()
			l := &karpv1.NodeClaimList{}
			if err := env.Client.List(t.Context(), l, client.MatchingLabels{karpv1.NodePoolLabelKey: f.np.Name}); err != nil {
				t.Fatal(err)
			}
			if len(l.Items) != 1 || l.Items[0].Name != old.Name {
				t.Fatalf("%v: want only the drifted claim, being deleted", names(l.Items))
			}
			gone := l.Items[0]
			gone.Finalizers = nil
			if err := env.Client.Update(t.Context(), &gone); err != nil {
				t.Fatal(err)
			}
			f.reconcile()
			claims = f.claims()
			if held, _ := pinned(claims); len(claims) != 1 || claims[0].Name == old.Name || held["cr-drift1"] != 1 {
				t.Fatalf("%v, %v pinned: want a new claim on the freed machine", names(claims), held)
			}
			if meta.IsStatusConditionTrue(claims[0].Status.Conditions, karpv1.ConditionTypeDrifted) {
				t.Fatal("the refill is drifted")
			}
		})
	}
}

// A static pool asking for two instance types at least (minValues) pins a claim to its
// reservation's one type without minValues — the API refuses a requirement with fewer values
// than its minValues — and its other claims keep theirs.
func TestStaticPoolWithMinValuesLaunchesIntoItsReservation(t *testing.T) {
	two := 2
	f := setup(t, 2, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeReserved, karpv1.CapacityTypeOnDemand}},
			{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large", "m5.xlarge"}, MinValues: &two}}
	})
	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: f.np.Spec.Template.Spec.NodeClassRef.Name}, snc); err != nil {
		t.Fatal(err)
	}
	snc.Spec.InstanceTypes = append(snc.Spec.InstanceTypes, "m5.xlarge")
	if err := env.Client.Update(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	f.reserve("cr-staticmv", 1)
	f.reconcile()
	claims := f.claims()
	if held, off := pinned(claims); len(claims) != 2 || held["cr-staticmv"] != 1 || off != 1 {
		t.Fatalf("%d claims, %v pinned, %d off reserved capacity: want 2, 1, 1", len(claims), held, off)
	}
	for _, nc := range claims {
		for _, r := range nc.Spec.Requirements {
			if r.Key != karpv1.InstanceTypeLabelKey {
				continue
			}
			mv := 0
			if r.MinValues != nil {
				mv = *r.MinValues
			}
			if pin := cloudprovider.PinnedReservation(&nc) != ""; pin && (mv != 0 || len(r.Values) != 1) || !pin && mv != 2 {
				t.Errorf("claim %s (pinned %v): instance types %v with minValues %d", nc.Name, pin, r.Values, mv)
			}
		}
	}
}
