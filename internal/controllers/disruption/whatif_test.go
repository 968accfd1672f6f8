package disruption

import (
	"bytes"
	"maps"
	"math"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/record"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/whatif"
)

// `kubectl capstan simulate --policy Balanced` on a recording of a WhenEmpty pool predicts the
// consolidation the controller performs once the pool is switched to Balanced: the same nodes
// removed, as many replacements, the same $/h left (within 1%); as configured, it predicts
// nothing.
func TestSimulateOnARecordingPredictsTheController(t *testing.T) {
	f := newFixture(t, "whatif", func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	})
	f.node("whatif-full", "m5.2xlarge", "1", "1", "1", "1", "1")
	f.node("whatif-light", "m5.2xlarge", "1")
	f.node("whatif-lighter", "m5.xlarge", "500m")

	rec, err := record.Record(t.Context(), env.Client, f.cloud.Provider, record.Options{Now: f.clk.Now()})
	if err != nil {
		t.Fatal(err)
	}
	// Through the file, as a user shares it.
	var file bytes.Buffer
	if err := rec.Write(&file); err != nil {
		t.Fatal(err)
	}
	if rec, err = record.Read(&file); err != nil {
		t.Fatal(err)
	}
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := rec.Cloud()
	if err != nil {
		t.Fatal(err)
	}
	a, err := whatif.Simulate(t.Context(), rec.Reader(s), cloud, whatif.Changes{Policy: karpv1.ConsolidationPolicyBalanced},
		whatif.Options{Now: rec.RecordedAt.Time})
	if err != nil {
		t.Fatal(err)
	}
	ours := func(names []string) []string {
		return slices.DeleteFunc(slices.Clone(names), func(n string) bool { return len(n) < 7 || n[:7] != "whatif-" })
	}
	if got := ours(a.Settled.Removed); len(got) != 0 {
		t.Errorf("as configured (WhenEmpty), simulate removes %v; nothing is empty", got)
	}
	if a.Changed == nil || len(ours(a.Changed.Removed)) == 0 {
		t.Fatalf("with Balanced, simulate removes nothing: %+v", a.Changed)
	}
	predicted := ours(a.Changed.Removed)

	// The live pool switched to Balanced; the controller's rounds until it does nothing more.
	np := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: f.pool.Name}, np); err != nil {
		t.Fatal(err)
	}
	np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyBalanced
	if err := env.Client.Update(t.Context(), np); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		f.round(f.ctrl)
	}
	var removed []string
	left := 0.0
	its := slices.Collect(maps.Values(f.its))
	for _, name := range []string{"whatif-full", "whatif-light", "whatif-lighter"} {
		nc := f.claim(name)
		if nc == nil || !nc.DeletionTimestamp.IsZero() || f.tainted(name) {
			removed = append(removed, name)
			continue
		}
		price, ok := nodeclaims.OfferingPrice(its, nc.Labels[karpv1.InstanceTypeLabelKey], "zone-a", karpv1.CapacityTypeOnDemand)
		if !ok {
			t.Fatalf("no price for %s", name)
		}
		left += price
	}
	// A replacement is priced at the cheapest type its requirements allow, as it launches.
	launched := 0
	for _, r := range f.replacements() {
		cheapest := math.Inf(1)
		for _, req := range r.Spec.Requirements {
			if req.Key != karpv1.InstanceTypeLabelKey {
				continue
			}
			for _, typ := range req.Values {
				if price, ok := nodeclaims.OfferingPrice(its, typ, "zone-a", karpv1.CapacityTypeOnDemand); ok {
					cheapest = min(cheapest, price)
				}
			}
		}
		left += cheapest
		launched++
	}
	slices.Sort(predicted)
	if !slices.Equal(removed, predicted) {
		t.Errorf("the controller removed %v; simulate predicted %v", removed, predicted)
	}
	if launched != len(a.Changed.Launched) {
		t.Errorf("the controller launched %d replacement(s); simulate predicted %v", launched, a.Changed.Launched)
	}
	var simulated float64
	for _, m := range a.Changed.Machines {
		if m.NodePool == f.pool.Name {
			simulated += m.Price
		}
	}
	if math.Abs(simulated-left) > 0.01*left {
		t.Errorf("the controller leaves %.4f $/h in the pool; simulate predicted %.4f", left, simulated)
	}
	t.Logf("removed %v, launched %d; %.4f $/h left", removed, launched, left)
}
