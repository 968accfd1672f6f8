package provisioning

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
)

// pinnedClaims counts the pool's NodeClaims pinned to each capacity reservation.
func pinnedClaims(t *testing.T, pool string) (map[string]int, int) {
	t.Helper()
	held, total := map[string]int{}, 0
	for _, nc := range claimsOf(t, pool) {
		total++
		if id := cloudprovider.PinnedReservation(&nc); id != "" {
			held[id]++
		}
	}
	return held, total
}

// A capacity reservation's machines are counted by the NodeClaims pinned to it, so that no
// pass — the next one, or the first pass of a restarted Capstan — plans more claims into it
// than it holds, and a claim that goes frees its slot.
func TestReservationSlotsAreCountedByTheClaimsAcrossPasses(t *testing.T) {
	np := pool("prov-reserved", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
			Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved}}}
	})
	p, _ := setup(t, np)
	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: np.Spec.Template.Spec.NodeClassRef.Name}, snc); err != nil {
		t.Fatal(err)
	}
	snc.Spec.CapacityReservations = []simv1alpha1.SimCapacityReservation{{ID: "cr-p1", InstanceType: "m5.large", Zone: "zone-a", Count: 3}}
	if err := env.Client.Update(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	// Every pod needs a machine of its own.
	alone := func(p *corev1.Pod) {
		p.Labels["app"] = "spread"
		oneHostPerPod("spread")(p)
	}
	provision := func(p *Provisioner) {
		t.Helper()
		if _, err := p.Provision(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	// Five pods of one machine each: the reservation's three machines, and two on-demand.
	pendingPods(t, ns, "first", 5, "1", alone)
	provision(p)
	if held, total := pinnedClaims(t, "prov-reserved"); held["cr-p1"] != 3 || total != 5 {
		t.Fatalf("after the first pass: %v pinned of %d claims, want 3 of 5", held, total)
	}

	// More pods, in another pass and then by a new provisioner over a new cloud provider (a
	// restart): the three claims still hold the reservation.
	pendingPods(t, ns, "second", 2, "1", alone)
	provision(p)
	pendingPods(t, ns, "third", 2, "1", alone)
	restarted := &Provisioner{Client: env.Client, Cloud: simtest.New(t, env.Client).Provider, Clock: p.Clock, Recorder: p.Recorder}
	provision(restarted)
	if held, total := pinnedClaims(t, "prov-reserved"); held["cr-p1"] != 3 || total != 9 {
		t.Fatalf("after three passes and a restart: %v pinned of %d claims, want 3 of 9", held, total)
	}

	// A pinned claim that is gone gives its slot to its pods, pending again.
	for _, nc := range claimsOf(t, "prov-reserved") {
		if cloudprovider.PinnedReservation(&nc) == "cr-p1" {
			nc.Finalizers = nil
			if err := env.Client.Update(t.Context(), &nc); err != nil {
				t.Fatal(err)
			}
			if err := env.Client.Delete(t.Context(), &nc); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	provision(restarted)
	if held, total := pinnedClaims(t, "prov-reserved"); held["cr-p1"] != 3 || total != 9 {
		t.Fatalf("after a pinned claim went: %v pinned of %d claims, want 3 of 9", held, total)
	}
}
