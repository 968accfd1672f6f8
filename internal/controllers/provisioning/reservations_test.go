package provisioning

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
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

// reserve gives the pool's SimNodeClass (made by setup) the reservation, and the reserved type
// when the class does not offer it yet.
func reserve(t *testing.T, np *karpv1.NodePool, r simv1alpha1.SimCapacityReservation) {
	t.Helper()
	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: np.Spec.Template.Spec.NodeClassRef.Name}, snc); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(snc.Spec.InstanceTypes, r.InstanceType) {
		snc.Spec.InstanceTypes = append(snc.Spec.InstanceTypes, r.InstanceType)
	}
	snc.Spec.CapacityReservations = append(snc.Spec.CapacityReservations, r)
	if err := env.Client.Update(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
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
	reserve(t, np, simv1alpha1.SimCapacityReservation{ID: "cr-p1", InstanceType: "m5.large", Zone: "zone-a", Count: 3})
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

// Issue 25's case: a reservation of 3 m7i.large in one zone and 5 pods that each need a whole
// machine. Passes never run at once in one Capstan (one provisioner loop, on the leader only);
// what races them is the informer cache, which may not list a pass's NodeClaims when the next
// pass starts — here it never does. Two passes back to back, every NodeClaim launched at once
// (any the cloud refuses given up, as the lifecycle controller does on insufficient capacity),
// then a restarted provisioner: three machines in the reservation — never four — and two
// on-demand, five in all.
func TestAReservationOfThreeTakesThreeOfFiveMachines(t *testing.T) {
	np := pool("prov-m7i", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
			Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved}}}
	})
	p, _ := setup(t, np)
	reserve(t, np, simv1alpha1.SimCapacityReservation{ID: "cr-m7i", InstanceType: "m7i.large", Zone: "zone-a", Count: 3})
	cloud := p.Cloud.(*sim.Provider)
	ns := namespace(t)
	pendingPods(t, ns, "whole", 5, "1", func(p *corev1.Pod) {
		p.Labels["app"] = "whole"
		oneHostPerPod("whole")(p)
	})
	p.Client = laggingClient{env.Client}
	for range 2 {
		if _, err := p.Provision(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if held, total := pinnedClaims(t, "prov-m7i"); held["cr-m7i"] != 3 || total != 5 {
		t.Fatalf("two passes over a cache that lists no claim: %v pinned of %d claims, want 3 of 5", held, total)
	}
	// Every claim launched at once; those the reservation refuses are given up.
	launchAll := func() {
		t.Helper()
		var wg sync.WaitGroup
		for _, nc := range claimsOf(t, "prov-m7i") {
			if nc.Status.ProviderID != "" {
				continue
			}
			wg.Go(func() {
				got, err := cloud.Create(context.Background(), &nc)
				switch {
				case cloudprovider.IsInsufficientCapacity(err):
					nc.Finalizers = nil
					_ = env.Client.Update(context.Background(), &nc)
					if err := env.Client.Delete(context.Background(), &nc); err != nil {
						t.Error(err)
					}
				case err != nil:
					t.Error(err)
				default:
					nc.Status.ProviderID = got.Status.ProviderID
					if err := env.Client.Status().Update(context.Background(), &nc); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
	}
	launchAll()
	if n := cloud.Cloud().InReservation("cr-m7i"); n > 3 {
		t.Fatalf("%d machines in a reservation of 3", n)
	}
	// A restarted provisioner plans the given-up claims' pods; their machines launch.
	restarted := &Provisioner{Client: env.Client, Cloud: simtest.New(t, env.Client).Provider, Clock: p.Clock, Recorder: p.Recorder}
	if _, err := restarted.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	launchAll()
	reserved, onDemand := 0, 0
	for _, inst := range cloud.Cloud().Instances() {
		switch {
		case inst.ReservationID == "cr-m7i":
			reserved++
		case inst.CapacityType == karpv1.CapacityTypeOnDemand:
			onDemand++
		}
	}
	if reserved != 3 || onDemand != 2 || len(claimsOf(t, "prov-m7i")) != 5 {
		t.Fatalf("%d reserved and %d on-demand machines for %d NodeClaims, want 3, 2 and 5", reserved, onDemand, len(claimsOf(t, "prov-m7i")))
	}
}

// instanceTypeMinValues is the minValues of a claim's instance-type requirement, and its values.
func instanceTypeMinValues(nc *karpv1.NodeClaim) (int, []string) {
	for _, r := range nc.Spec.Requirements {
		if r.Key == karpv1.InstanceTypeLabelKey && r.Operator == karpv1.NodeSelectorOpIn {
			if r.MinValues == nil {
				return 0, r.Values
			}
			return *r.MinValues, r.Values
		}
	}
	return 0, nil
}

// A pool asking for two instance types at least (minValues, Karpenter's flexibility for spot and
// on-demand launches) may still use its capacity reservation: the claim pinned to it names the
// reservation's one type without minValues (the API refuses a requirement with fewer values
// than its minValues, and every provisioning pass failed on it), and the pool's other claims keep
// their minValues.
func TestAReservationPinsAClaimOfAPoolWithMinValues(t *testing.T) {
	two := 2
	np := pool("prov-minvalues", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved}},
			{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large", "m5.xlarge"}, MinValues: &two}}
	})
	p, _ := setup(t, np)
	reserve(t, np, simv1alpha1.SimCapacityReservation{ID: "cr-minvalues", InstanceType: "m5.large", Zone: "zone-a", Count: 1})
	reserve(t, np, simv1alpha1.SimCapacityReservation{ID: "cr-minvaluesx", InstanceType: "m5.xlarge", Zone: "zone-a", Count: 1})
	ns := namespace(t)
	pendingPods(t, ns, "flex", 3, "1", func(p *corev1.Pod) {
		p.Labels["app"] = "flex"
		oneHostPerPod("flex")(p)
	})
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	claims := claimsOf(t, "prov-minvalues")
	held, total := pinnedClaims(t, "prov-minvalues")
	if total != 3 || held["cr-minvalues"] != 1 || held["cr-minvaluesx"] != 1 {
		t.Fatalf("%v pinned of %d claims: want one claim in each reservation and one more", held, total)
	}
	for i := range claims {
		mv, values := instanceTypeMinValues(&claims[i])
		pinned := cloudprovider.PinnedReservation(&claims[i]) != ""
		if pinned && (mv != 0 || len(values) != 1) || !pinned && (mv != 2 || len(values) < 2) {
			t.Errorf("claim %s (pinned %v): instance types %v with minValues %d", claims[i].Name, pinned, values, mv)
		}
	}
}
