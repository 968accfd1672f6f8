package catalog

import (
	"testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func TestLoadAndConvert(t *testing.T) {
	entries, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1363 {
		t.Fatalf("catalog has %d entries, want the 1,363 of the shared data", len(entries))
	}
	its, err := InstanceTypes(entries, Options{Zones: []string{"a", "b"}, Spot: true, SpotFraction: func(string, string) float64 { return 0.5 }})
	if err != nil {
		t.Fatal(err)
	}
	var m5 = -1
	for i, it := range its {
		if it.Name == "m5.large" {
			m5 = i
		}
	}
	if m5 < 0 {
		t.Fatal("m5.large missing")
	}
	it := its[m5]
	if got := it.Capacity.Cpu().Value(); got != 2 {
		t.Errorf("m5.large capacity cpu %d, want 2", got)
	}
	alloc := it.Allocatable()
	if alloc.Cpu().MilliValue() >= 2000 || alloc.Memory().Value() >= it.Capacity.Memory().Value() {
		t.Errorf("allocatable %v not below capacity %v", alloc, it.Capacity)
	}
	if len(it.Offerings) != 4 {
		t.Fatalf("want on-demand and spot in two zones, got %d offerings", len(it.Offerings))
	}
	od, spot := it.Offerings[0], it.Offerings[1]
	if od.CapacityType != karpv1.CapacityTypeOnDemand || spot.CapacityType != karpv1.CapacityTypeSpot || spot.Price != od.Price/2 {
		t.Errorf("offerings %+v", it.Offerings[:2])
	}
	if r, ok := it.Requirements.Get(karpv1.ZoneLabelKey); !ok || len(r.Values()) != 2 {
		t.Errorf("zone requirement %v", r.String())
	}
}

func TestStableSpotFractionIsStableAndInRange(t *testing.T) {
	f := StableSpotFraction(0.3, 0.45)
	a, b := f("m5.large", "zone-a"), f("m5.large", "zone-a")
	if a != b || a < 0.3 || a > 0.45 {
		t.Fatalf("fraction %v, %v", a, b)
	}
	if f("m5.large", "zone-b") == a && f("c5.large", "zone-a") == a {
		t.Fatal("every type and zone has the same fraction")
	}
}

// maxPods and podsPerCore change a type's pod capacity, and the memory the kubelet reserves for
// pods moves with it (11 MiB per pod).
func TestKubeletSettingsChangePodCapacity(t *testing.T) {
	entries, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var m5 Entry
	for _, e := range entries {
		if e.Name == "m5.large" {
			m5 = e
		}
	}
	base, err := m5.InstanceType(Options{Zones: []string{"a"}})
	if err != nil {
		t.Fatal(err)
	}
	baseAlloc := base.Allocatable()
	defaultPods, baseMem := baseAlloc.Pods().Value(), baseAlloc.Memory().Value()
	if defaultPods != 29 {
		t.Fatalf("m5.large default pods %d, want 29 (its ENI limit)", defaultPods)
	}
	i32 := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name                 string
		maxPods, podsPerCore *int32
		want                 int64
	}{
		{"maxPods raises", i32(110), nil, 110},
		{"maxPods lowers", i32(8), nil, 8},
		{"podsPerCore caps the default", nil, i32(10), 20},
		{"the lower of maxPods and podsPerCore", i32(110), i32(10), 20},
		{"podsPerCore 0 means no cap", i32(50), i32(0), 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it, err := m5.InstanceType(Options{Zones: []string{"a"}, MaxPods: tc.maxPods, PodsPerCore: tc.podsPerCore})
			if err != nil {
				t.Fatal(err)
			}
			alloc := it.Allocatable()
			if got := alloc.Pods().Value(); got != tc.want {
				t.Fatalf("pods %d, want %d", got, tc.want)
			}
			if got, want := alloc.Memory().Value(), baseMem-(tc.want-defaultPods)*kubeReservedPerPod; got != want {
				t.Fatalf("allocatable memory %d, want %d", got, want)
			}
		})
	}
}
