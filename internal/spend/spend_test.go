package spend

import (
	"testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// The worst case is the dearest offering the requirements allow, unavailable ones included (one
// may be available at launch), with a reserved offering at its reservation's on-demand price.
func TestWorstCase(t *testing.T) {
	it := cloudprovider.NewInstanceType("m", nil, nil, nil, []cloudprovider.Offering{
		{Zone: "z1", CapacityType: karpv1.CapacityTypeSpot, Price: 0.03, Available: true},
		{Zone: "z1", CapacityType: karpv1.CapacityTypeOnDemand, Price: 0.10, Available: true},
		{Zone: "z2", CapacityType: karpv1.CapacityTypeOnDemand, Price: 0.12, Available: false},
		{Zone: "z2", CapacityType: karpv1.CapacityTypeReserved, Price: cloudprovider.ReservedPrice(0.12), Available: true, ReservationID: "cr-1"},
	})
	one := func(key, value string) requirements.Requirements {
		var rs requirements.Requirements
		rs.Add(requirements.Single(key, value))
		return rs
	}
	for _, tc := range []struct {
		name string
		reqs requirements.Requirements
		want float64
		ok   bool
	}{
		{"anything", requirements.Requirements{}, 0.12, true},
		{"spot", one(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeSpot), 0.03, true},
		{"zone z1", one(karpv1.ZoneLabelKey, "z1"), 0.10, true},
		{"reserved", one(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeReserved), 0.12, true},
		{"no such zone", one(karpv1.ZoneLabelKey, "z9"), 0, false},
	} {
		got, ok := WorstCase(it, tc.reqs)
		if ok != tc.ok || got < tc.want-1e-12 || got > tc.want+1e-12 {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// Milli rounds up, so that a sum of machines' prices never understates what they cost; an exact
// value stays as it is.
func TestMilliRoundsUp(t *testing.T) {
	for in, want := range map[float64]int64{0: 0, 0.0104: 11, 0.25: 250, 1.5: 1500, 0.1 + 0.2: 300} {
		if got := Milli(in); got != want {
			t.Errorf("Milli(%v) = %d, want %d", in, got, want)
		}
	}
}
