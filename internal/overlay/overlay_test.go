package overlay

import (
	"errors"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
)

func typ(name, family string, prices ...float64) *cloudprovider.InstanceType {
	var offers []cloudprovider.Offering
	zones := []string{"zone-a", "zone-b"}
	for i, p := range prices {
		ct := karpv1.CapacityTypeOnDemand
		if i >= len(zones) {
			ct = karpv1.CapacityTypeSpot
		}
		offers = append(offers, cloudprovider.Offering{Zone: zones[i%len(zones)], CapacityType: ct, Price: p, Available: true})
	}
	return cloudprovider.NewInstanceType(name, map[string]string{"karpenter.k8s.aws/instance-family": family, corev1.LabelArchStable: "amd64"},
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi")}, nil, offers)
}

// menu: on-demand in zone-a and zone-b, then spot in zone-a and zone-b.
func menu() []*cloudprovider.InstanceType {
	return []*cloudprovider.InstanceType{typ("m5.large", "m5", 0.096, 0.096, 0.04, 0.04), typ("c5.large", "c5", 0.085, 0.085, 0.035, 0.035)}
}

func ov(name string, weight int32, mutate func(*v1alpha1.NodeOverlaySpec)) v1alpha1.NodeOverlay {
	o := v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if weight != 0 {
		o.Spec.Weight = ptr.To(weight)
	}
	mutate(&o.Spec)
	return o
}

func req(key string, op corev1.NodeSelectorOperator, values ...string) v1alpha1.NodeSelectorRequirement {
	return v1alpha1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func priceOf(t *testing.T, its []*cloudprovider.InstanceType, name, zone, ct string) float64 {
	t.Helper()
	for _, it := range its {
		if it.Name != name {
			continue
		}
		for _, o := range it.Offerings {
			if o.Zone == zone && o.CapacityType == ct {
				return o.Price
			}
		}
	}
	t.Fatalf("no offering %s %s %s", name, zone, ct)
	return 0
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Each form of price and priceAdjustment, and the floor at zero.
func TestAdjustPrice(t *testing.T) {
	for _, tc := range []struct {
		price  float64
		change string
		want   float64
	}{
		{0.5, "0.12", 0.12}, {0.5, "+0.1", 0.6}, {0.5, "-0.05", 0.45}, {0.5, "+10%", 0.55},
		{0.5, "-20%", 0.4}, {0.5, "-100%", 0}, {0.5, "-1", 0}, {0.5, "-2.5%", 0.4875}, {0.5, "", 0.5},
	} {
		if got := AdjustPrice(tc.price, tc.change); !near(got, tc.want) {
			t.Errorf("AdjustPrice(%v, %q) = %v, want %v", tc.price, tc.change, got, tc.want)
		}
	}
}

// The savings-plan case of aws#2259: a discount on on-demand m5 makes it cheaper than c5, and
// only the offerings the overlay selects change; the input types are not modified.
func TestAnOverlayChangesTheOfferingsItSelects(t *testing.T) {
	its := menu()
	plan := ov("savings-plan", 0, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{
			req("karpenter.k8s.aws/instance-family", corev1.NodeSelectorOpIn, "m5"),
			req(karpv1.CapacityTypeLabelKey, corev1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand)}
		s.PriceAdjustment = ptr.To("-25%")
	})
	table, verdicts := Evaluate([]v1alpha1.NodeOverlay{plan}, []Pool{{Name: "default", Types: its}})
	if len(verdicts) != 0 {
		t.Fatalf("verdicts %v", verdicts)
	}
	out := table.Apply("default", its)
	if got := priceOf(t, out, "m5.large", "zone-b", karpv1.CapacityTypeOnDemand); !near(got, 0.072) {
		t.Errorf("m5.large on-demand: %v, want 0.072 (0.096 − 25%%)", got)
	}
	if got := priceOf(t, out, "m5.large", "zone-a", karpv1.CapacityTypeSpot); got != 0.04 {
		t.Errorf("m5.large spot: %v, want unchanged 0.04", got)
	}
	if out[1] != its[1] {
		t.Error("c5.large, which no overlay selects, was copied")
	}
	if got := priceOf(t, its, "m5.large", "zone-a", karpv1.CapacityTypeOnDemand); got != 0.096 {
		t.Errorf("the input was modified: %v", got)
	}
}

// Higher weight wins an offering; of two overlays of equal weight selecting one offering, the one
// taken second (names in reverse order) conflicts and applies nowhere, even where it alone selects.
func TestWeightsOrderOverlaysAndEqualWeightsConflict(t *testing.T) {
	its := menu()
	heavy := ov("heavy", 10, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{req(karpv1.InstanceTypeLabelKey, corev1.NodeSelectorOpIn, "m5.large")}
		s.Price = ptr.To("0.01")
	})
	all := ov("all", 5, func(s *v1alpha1.NodeOverlaySpec) { s.PriceAdjustment = ptr.To("+1") })
	other := ov("other", 5, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{req(karpv1.InstanceTypeLabelKey, corev1.NodeSelectorOpIn, "c5.large")}
		s.PriceAdjustment = ptr.To("+2")
	})
	table, verdicts := Evaluate([]v1alpha1.NodeOverlay{all, heavy, other}, []Pool{{Name: "default", Types: its}})
	if v, ok := verdicts["all"]; !ok || v.Reason != ReasonConflict || !strings.Contains(v.Message, "c5.large") {
		t.Fatalf("verdicts %v: want all (taken after other, same weight) in conflict over c5.large", verdicts)
	}
	if _, ok := verdicts["other"]; ok || len(verdicts) != 1 {
		t.Fatalf("verdicts %v: want only all", verdicts)
	}
	out := table.Apply("default", its)
	if got := priceOf(t, out, "m5.large", "zone-a", karpv1.CapacityTypeSpot); got != 0.01 {
		t.Errorf("m5.large: %v, want heavy's 0.01", got)
	}
	if got := priceOf(t, out, "c5.large", "zone-a", karpv1.CapacityTypeOnDemand); !near(got, 2.085) {
		t.Errorf("c5.large: %v, want other's +2", got)
	}
}

// Requirements on the NodePool's name and template labels select per pool; zone requirements
// select offerings.
func TestOverlaysSelectByPoolAndZone(t *testing.T) {
	its := menu()
	o := ov("team-a-zone-b", 0, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{
			req("team", corev1.NodeSelectorOpIn, "a"), req(karpv1.ZoneLabelKey, corev1.NodeSelectorOpIn, "zone-b")}
		s.Price = ptr.To("0")
	})
	byName := ov("by-name", 0, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{req(karpv1.NodePoolLabelKey, corev1.NodeSelectorOpIn, "b")}
		s.Capacity = corev1.ResourceList{"example.com/slice": resource.MustParse("4")}
	})
	table, verdicts := Evaluate([]v1alpha1.NodeOverlay{o, byName}, []Pool{
		{Name: "a", Labels: map[string]string{"team": "a"}, Types: its}, {Name: "b", Types: its}})
	if len(verdicts) != 0 {
		t.Fatalf("verdicts %v", verdicts)
	}
	a, b := table.Apply("a", its), table.Apply("b", its)
	if got := priceOf(t, a, "c5.large", "zone-b", karpv1.CapacityTypeSpot); got != 0 {
		t.Errorf("pool a, zone-b: %v, want 0", got)
	}
	if got := priceOf(t, a, "c5.large", "zone-a", karpv1.CapacityTypeSpot); got != 0.035 {
		t.Errorf("pool a, zone-a: %v, want unchanged", got)
	}
	if got := priceOf(t, b, "c5.large", "zone-b", karpv1.CapacityTypeSpot); got != 0.035 {
		t.Errorf("pool b (no team label): %v, want unchanged", got)
	}
	if q := b[0].Capacity["example.com/slice"]; q.Value() != 4 {
		t.Errorf("pool b capacity %v, want example.com/slice 4", b[0].Capacity)
	}
	if _, ok := a[0].Capacity["example.com/slice"]; ok {
		t.Error("pool a got pool b's capacity")
	}
}

// Capacity merges per resource: a heavier overlay's value wins, other resources add up, and two
// overlays of one weight setting one resource conflict.
func TestCapacityMergesPerResource(t *testing.T) {
	its := menu()
	heavy := ov("heavy", 10, func(s *v1alpha1.NodeOverlaySpec) {
		s.Capacity = corev1.ResourceList{"example.com/a": resource.MustParse("1")}
	})
	light := ov("light", 1, func(s *v1alpha1.NodeOverlaySpec) {
		s.Capacity = corev1.ResourceList{"example.com/a": resource.MustParse("9"), "example.com/b": resource.MustParse("2")}
	})
	twin := ov("twin", 1, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{req(karpv1.InstanceTypeLabelKey, corev1.NodeSelectorOpIn, "m5.large")}
		s.Capacity = corev1.ResourceList{"example.com/b": resource.MustParse("3")}
	})
	lightest := ov("lightest", 0, func(s *v1alpha1.NodeOverlaySpec) {
		s.Capacity = corev1.ResourceList{"example.com/a": resource.MustParse("7")}
	})
	table, verdicts := Evaluate([]v1alpha1.NodeOverlay{lightest, light, heavy, twin}, []Pool{{Name: "p", Types: its}})
	if v := verdicts["light"]; v.Reason != ReasonConflict || len(verdicts) != 1 {
		t.Fatalf("verdicts %v: want light (after twin, same weight, both example.com/b) in conflict", verdicts)
	}
	out := table.Apply("p", its)
	m5 := out[0].Capacity
	if a, b := m5["example.com/a"], m5["example.com/b"]; a.Value() != 1 || b.Value() != 3 {
		t.Errorf("m5.large capacity %v: want a=1 (heavy, not lightest's 7), b=3 (twin)", m5)
	}
	if cpu := m5[corev1.ResourceCPU]; cpu.Value() != 2 {
		t.Errorf("cpu %v lost", m5)
	}
}

// What the API server's schema cannot check is refused naming the field and value; an invalid
// overlay applies nowhere.
func TestInvalidOverlaysAreNamed(t *testing.T) {
	bad := ov("bad", 0, func(s *v1alpha1.NodeOverlaySpec) {
		s.Requirements = []v1alpha1.NodeSelectorRequirement{req("not a key", corev1.NodeSelectorOpIn, "x")}
		s.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		s.PriceAdjustment = ptr.To("10%")
	})
	_, err := Validate(&bad)
	for _, want := range []string{`spec.requirements[0].key "not a key"`, "spec.capacity[cpu]", `spec.priceAdjustment "10%"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to name %s", err, want)
		}
	}
	its := menu()
	table, verdicts := Evaluate([]v1alpha1.NodeOverlay{bad}, []Pool{{Name: "p", Types: its}})
	if verdicts["bad"].Reason != ReasonRuntimeValidation {
		t.Errorf("verdicts %v", verdicts)
	}
	if out := table.Apply("p", its); out[0] != its[0] || out[1] != its[1] {
		t.Error("an invalid overlay changed types")
	}
}

// Before the first evaluation nothing is answered; a pool the evaluation left out is pending for
// decisions, and launches from it use the cloud's prices.
func TestStorePendingPools(t *testing.T) {
	s := &Store{}
	var pending *cloudprovider.OverlaysPendingError
	if _, err := s.Apply("p", menu()); !errors.As(err, &pending) {
		t.Fatalf("before any evaluation: %v", err)
	}
	if _, err := s.ForLaunches().Apply("p", menu()); !errors.As(err, &pending) {
		t.Fatalf("launch before any evaluation: %v", err)
	}
	table, _ := Evaluate(nil, []Pool{{Name: "p", Types: menu()}})
	s.Set(table)
	if _, err := s.Apply("p", menu()); err != nil {
		t.Fatalf("evaluated pool: %v", err)
	}
	if _, err := s.Apply("new", menu()); !errors.As(err, &pending) || pending.NodePool != "new" {
		t.Fatalf("pool left out: %v", err)
	}
	if its, err := s.ForLaunches().Apply("new", menu()); err != nil || len(its) != 2 {
		t.Fatalf("launch from a pool left out: %v, %v", its, err)
	}
}
