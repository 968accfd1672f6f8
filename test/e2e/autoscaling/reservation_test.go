package autoscaling

import (
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// A capacity reservation is used first and never past its count: pods that each need a machine
// fill the reservation's two machines and go on-demand beyond them, also when more come later.
func TestCapacityReservationIsUsedFirstAndNeverOverbooked(t *testing.T) {
	pool(t, "e2e-reserved", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.Zones = []string{"zone-a"}
		snc.Spec.InstanceTypes = []string{"c5.large", "m5.large", "m5.xlarge"}
		snc.Spec.CapacityReservations = []simv1alpha1.SimCapacityReservation{{ID: "cr-e2e", InstanceType: "m5.large", Zone: "zone-a", Count: 2}}
	}, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn,
			Values: []string{karpv1.CapacityTypeReserved, karpv1.CapacityTypeOnDemand}}}
	})
	d := deployment(t, "reserved", "e2e-reserved", 3, "1", "1Gi", spreadOneNodeEach("reserved"))
	check := func(n int) {
		t.Helper()
		eventually(t, "every pod Running", 3*time.Minute, running(t, "reserved", n))
		inReservation := 0
		for _, nc := range claims(t, "e2e-reserved") {
			if nc.Labels[cloudprovider.ReservationIDLabelKey] == "cr-e2e" {
				inReservation++
				if nc.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved || nc.Labels[karpv1.InstanceTypeLabelKey] != "m5.large" {
					t.Fatalf("claim %s in cr-e2e labelled %v", nc.Name, nc.Labels)
				}
			}
		}
		machines := 0
		instances, _ := cloudState(t)
		for _, inst := range instances {
			if inst.ReservationID == "cr-e2e" {
				machines++
			}
		}
		if inReservation != 2 || machines != 2 {
			t.Fatalf("%d pods: %d claims and %d machines in the reservation of 2", n, inReservation, machines)
		}
	}
	check(3)
	scale(t, d, 5)
	check(5)
}
