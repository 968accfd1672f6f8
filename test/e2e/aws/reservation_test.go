package aws

import (
	"context"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/test/awsfake"
)

// Karpenter's ODCR task on the local AWS endpoints: an EC2NodeClass selects a capacity
// reservation by tag, a NodePool allows reserved then on-demand capacity; the reservation's two
// machines are used first, the third pod's goes on-demand, and none goes past the reservation.
func TestCapacityReservationIsUsedFirstThenOnDemand(t *testing.T) {
	const typ = "m6i.large"
	s.aws.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0e2e", InstanceType: typ, Zone: s.aws.Zones()[0].Name, Total: 2,
		Tags: map[string]string{"purpose": "e2e"}})
	nc, np := poolObjects("reserved", req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeReserved, karpv1.CapacityTypeOnDemand),
		req(karpv1.InstanceTypeLabelKey, karpv1.NodeSelectorOpIn, typ))
	nc.Spec.CapacityReservationSelectorTerms = []awsv1.CapacityReservationSelectorTerm{{Tags: map[string]string{"purpose": "e2e"}}}
	for _, o := range []client.Object{nc, np} {
		if err := s.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = s.Client.Delete(ctx, np)
		eventuallyGone(t, "reserved")
		_ = s.Client.Delete(ctx, nc)
	})
	// 1.5 CPU each: one pod per machine.
	workersOf(t, "reserved-workers", 3, "1500m", "1Gi", map[string]string{"pool": "reserved"}, nil)
	eventually(t, "the workers Running", 3*time.Minute, running(t, "reserved-workers", 3))
	held, onDemand := 0, 0
	for _, c := range claims(t, "reserved") {
		switch c.Labels[karpv1.CapacityTypeLabelKey] {
		case karpv1.CapacityTypeReserved:
			if c.Labels[cloudprovider.ReservationIDLabelKey] != "cr-0e2e" || c.Labels[cloudprovider.ReservationTypeLabelKey] != "default" {
				t.Errorf("reserved claim %s labelled %v", c.Name, c.Labels)
			}
			held++
		case karpv1.CapacityTypeOnDemand:
			onDemand++
		}
	}
	if held != 2 || onDemand != 1 || s.aws.InReservation("cr-0e2e") != 2 {
		t.Fatalf("%d reserved and %d on-demand claims, %d instances in the reservation; want 2, 1 and 2", held, onDemand, s.aws.InReservation("cr-0e2e"))
	}
}
