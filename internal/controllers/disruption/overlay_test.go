package disruption

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/overlay"
)

// Consolidation prices nodes and replacements through the NodeOverlays: an m5.large holding one
// pod of 1 CPU is the cheapest fitting machine at the cloud's prices and stays; priced at 1 $/h
// by an overlay, it is replaced by an m5.xlarge (0.192 $/h), with the overlay's saving in the
// event.
func TestConsolidationSavingsReadOverlayPrices(t *testing.T) {
	f := newFixture(t, "overlaid", nil)
	f.node("overlaid-small", "m5.large", "1")
	f.round(f.ctrl)
	if n := len(f.replacements()); n != 0 {
		t.Fatalf("%d replacements at the cloud's prices, want none", n)
	}
	its, err := f.cloud.Provider.GetInstanceTypes(t.Context(), f.pool)
	if err != nil {
		t.Fatal(err)
	}
	dear := v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "dear"}, Spec: v1alpha1.NodeOverlaySpec{
		Requirements: []v1alpha1.NodeSelectorRequirement{{Key: karpv1.InstanceTypeLabelKey, Operator: "In", Values: []string{"m5.large"}}},
		Price:        ptr.To("1")}}
	table, verdicts := overlay.Evaluate([]v1alpha1.NodeOverlay{dear}, []overlay.Pool{{Name: f.pool.Name, Types: its}})
	if len(verdicts) != 0 {
		t.Fatal(verdicts)
	}
	store := &overlay.Store{}
	store.Set(table)
	c := f.controller()
	c.Cloud = cloudprovider.WithOverlays(f.cloud.Provider, store)
	f.round(c)
	repl := f.replacements()
	if len(repl) != 1 {
		t.Fatalf("%d replacements at the overlay's price, want 1", len(repl))
	}
	found := false
	for _, e := range f.events() {
		found = found || strings.Contains(e, "$1.0000/h → $0.1920/h")
	}
	if !found {
		t.Errorf("no event with the overlay's price before and the replacement's after")
	}
}
