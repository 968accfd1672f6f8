package sweep

import (
	"math"
	"math/rand/v2"
	"reflect"
	gosync "sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver/workload"
)

// CheapestKeep is exact: on small random clusters it equals the cheapest of every subset.
func TestCheapestKeepIsTheCheapestCoveringSubset(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		deps := 1 + rng.IntN(3)
		machines := make([]Holding, 1+rng.IntN(9))
		have := make([]int, deps)
		for i := range machines {
			machines[i] = Holding{Price: float64(1 + rng.IntN(20)), Pods: make([]int, deps)}
			for d := range deps {
				machines[i].Pods[d] = rng.IntN(6)
				have[d] += machines[i].Pods[d]
			}
		}
		want := make([]int, deps)
		for d := range deps {
			want[d] = rng.IntN(have[d] + 2) // sometimes one more than the machines hold
		}
		brute := math.Inf(1)
		for set := range 1 << len(machines) {
			price, got := 0.0, make([]int, deps)
			for i, m := range machines {
				if set&(1<<i) != 0 {
					price += m.Price
					for d := range deps {
						got[d] += m.Pods[d]
					}
				}
			}
			covers := true
			for d := range deps {
				covers = covers && got[d] >= want[d]
			}
			if covers {
				brute = min(brute, price)
			}
		}
		price, ok := CheapestKeep(machines, want)
		if !ok || price != brute {
			t.Fatalf("trial %d: machines %v, want %v: CheapestKeep = %v (ok %v), every subset's cheapest = %v", trial, machines, want, price, ok, brute)
		}
	}
}

// A table too large to build is refused rather than filled.
func TestCheapestKeepRefusesAHugeTable(t *testing.T) {
	if price, ok := CheapestKeep([]Holding{{Price: 1, Pods: []int{1, 1, 1}}}, []int{1000, 1000, 1000}); ok || !math.IsInf(price, 1) {
		t.Fatalf("CheapestKeep = %v, %v; want +Inf, false", price, ok)
	}
}

// The same seed draws the same shapes, within the ranges the sweep promises.
func TestDrawIsSeededAndWithinRange(t *testing.T) {
	a, b := Draw(7, 200, []string{"kwok", "capstan"}), Draw(7, 200, []string{"kwok", "capstan"})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two draws of seed 7 differ")
	}
	if reflect.DeepEqual(a, Draw(8, 200, []string{"kwok", "capstan"})) {
		t.Fatal("seeds 7 and 8 draw the same shapes")
	}
	seen := map[string]bool{}
	for _, s := range a {
		seen[s.Menu], seen[s.Capacity], seen[string(s.Policy)] = true, true, true
		if len(s.Deployments) < 1 || len(s.Deployments) > 3 || s.Steps < 1 || s.Steps > 3 || s.FirstAfter < 0 || s.FirstAfter > 300e9 {
			t.Fatalf("shape out of range: %s", s)
		}
		for _, d := range s.Deployments {
			cpu, mem := resource.MustParse(d.CPU), resource.MustParse(d.Memory)
			gibPerCPU := float64(mem.Value()) / (1 << 30) / cpu.AsApproximateFloat64()
			if cpu.MilliValue() < 100 || cpu.MilliValue() > 4000 || mem.Value() < 128<<20 || mem.Value() > 16<<30 {
				t.Fatalf("pod %s/%s out of 100m/128Mi–4/16Gi: %s", d.CPU, d.Memory, s)
			}
			if (mem.Value() > 128<<20 && mem.Value() < 16<<30) && (gibPerCPU < 0.99 || gibPerCPU > 8.01) {
				t.Fatalf("pod %s/%s has %.2f GiB per CPU, want 1–8: %s", d.CPU, d.Memory, gibPerCPU, s)
			}
			if f, n := float64(d.Final), float64(d.Pods); d.Final < 1 || f < 0.05*n-0.5 || f > 0.9*n+0.5 {
				t.Fatalf("scale-in to %d of %d: %s", d.Final, d.Pods, s)
			}
		}
	}
	for _, k := range []string{"kwok", "capstan", SpotAndOnDemand, SpotOnly, OnDemandOnly, "WhenEmptyOrUnderutilized", "Balanced"} {
		if !seen[k] {
			t.Errorf("200 shapes never drew %s", k)
		}
	}
}

// A small sweep, as make test runs it: over the first 12 shapes of seed 1 on the default catalog
// and a kwok-format menu of Karpenter's shape (workload.KWOKMenu), no shape settles above its
// peak, no pod is moved twice, and the median settled price is within 15% of a fresh plan of the
// pods left. (The sweep's own marks against the LP bound and the no-move set are reported by
// hack/scaledown-sweep; docs/benchmarks.md, "A sweep of scale-down shapes".)
func TestSweptScaleDownsSettleNearAFreshPlan(t *testing.T) {
	kwok, err := workload.KWOKMenu(workload.MenuFamily{Name: "c", GiBPerCPU: 2, PricePerCPU: 0.04},
		workload.MenuFamily{Name: "m", GiBPerCPU: 4, PricePerCPU: 0.048}, workload.MenuFamily{Name: "r", GiBPerCPU: 8, PricePerCPU: 0.06})
	if err != nil {
		t.Fatal(err)
	}
	capstan, err := DefaultCatalog(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	menus := map[string][]*cloudprovider.InstanceType{"kwok": kwok, "capstan": capstan}
	shapes := Draw(1, 12, []string{"kwok", "capstan"})
	results := make([]Result, len(shapes))
	var wg gosync.WaitGroup
	for i, s := range shapes {
		wg.Go(func() {
			r, err := Play(s, menus, Options{})
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		})
	}
	wg.Wait()
	var overFresh []float64
	for _, r := range results {
		t.Logf("%s: peak %.3f, settled %.3f, fresh %.3f, %d evicted of %d left, %d twice", r.Shape, r.Peak, r.Settled, r.Fresh, r.Evictions, r.Left, r.Twice)
		if r.Settled > r.Peak+1e-9 {
			t.Errorf("shape %d settles at %.3f $/h, above its peak %.3f", r.Shape.Index, r.Settled, r.Peak)
		}
		if r.Twice > 0 {
			t.Errorf("shape %d moved %d pods twice", r.Shape.Index, r.Twice)
		}
		overFresh = append(overFresh, r.Settled/r.Fresh)
	}
	if m := quantile(overFresh, 0.5); m > 1.15 {
		t.Errorf("the median shape settles at %.3f times a fresh plan of its pods, want at most 1.15", m)
	}
}
