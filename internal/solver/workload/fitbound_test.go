package workload

import (
	"math"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver"
)

func boundType(name, cpu string, price float64) *cloudprovider.InstanceType {
	return cloudprovider.NewInstanceType(name, nil, corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods: resource.MustParse("110")}, nil,
		[]cloudprovider.Offering{{Zone: "z", CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true}})
}

// Four 2-CPU pods cannot use 1.9-CPU machines, however cheap their CPU: LPBound buys 8 CPUs of
// them (0.21 $/h), FitLPBound 8 CPUs of the 7.9-CPU type (0.405 $/h); the best whole plan is two
// of those (0.80 $/h).
func TestFitCutsRefuseCapacityThePodsCannotUse(t *testing.T) {
	its := []*cloudprovider.InstanceType{boundType("small", "1900m", 0.05), boundType("big", "7900m", 0.40)}
	var pods []*corev1.Pod
	for range 4 {
		pods = append(pods, Pod("p", "2", "1Gi", nil))
	}
	plain, fit := LPBound(its, pods), FitLPBound(its, pods)
	if want := 8 / 1.9 * 0.05; math.Abs(plain-want) > 1e-6 {
		t.Errorf("LPBound = %.4f, want %.4f", plain, want)
	}
	if want := 8 / 7.9 * 0.40; math.Abs(fit-want) > 1e-6 {
		t.Errorf("FitLPBound = %.4f, want %.4f", fit, want)
	}
}

// The cuts hold every whole-machine plan, so the bound never exceeds a real packing, and it is
// never below LPBound; with pods that fit everywhere it equals LPBound.
func TestFitLPBoundIsABound(t *testing.T) {
	its := FakeInstanceTypes(40)
	pods := DiversePods(300, 7)
	var plain []*corev1.Pod
	for _, p := range pods {
		if !HasHostnameConstraint(p) {
			plain = append(plain, p)
		}
	}
	lo, fit := LPBound(its, plain), FitLPBound(its, plain)
	if fit < lo-1e-9 {
		t.Errorf("FitLPBound %.4f < LPBound %.4f", fit, lo)
	}
	small := []*corev1.Pod{Pod("a", "100m", "128Mi", nil), Pod("b", "200m", "256Mi", nil)}
	if a, b := LPBound(its, small), FitLPBound(its, small); math.Abs(a-b) > 1e-9 {
		t.Errorf("pods that fit every type: LPBound %.6f, FitLPBound %.6f, want equal", a, b)
	}
	// Each pod alone on the cheapest type that holds it is a whole-machine plan.
	sum := 0.0
	for _, p := range plain {
		best := math.Inf(1)
		for _, it := range its {
			if cloudprovider.Fits(podRequestsWithSlot(p), it.Allocatable()) && it.Offerings[0].Price < best {
				best = it.Offerings[0].Price
			}
		}
		sum += best
	}
	if fit > sum {
		t.Errorf("FitLPBound %.4f above a whole-machine plan's %.4f", fit, sum)
	}
}

// Three 1.5-CPU pods on 4-CPU machines: two fit on a machine, so the configuration LP needs 1.5
// machines where the resource LPs buy 4.5 CPUs' worth (1.125); the best whole plan is 2.
func TestConfigLPBoundCountsWholePods(t *testing.T) {
	its := []*cloudprovider.InstanceType{boundType("four", "4", 1)}
	var pods []*corev1.Pod
	for range 3 {
		pods = append(pods, Pod("p", "1500m", "1Gi", nil))
	}
	if got := LPBound(its, pods); math.Abs(got-1.125) > 1e-6 {
		t.Errorf("LPBound = %.4f, want 1.125", got)
	}
	if got := ConfigLPBound(its, pods, 20); math.Abs(got-1.5) > 1e-6 {
		t.Errorf("ConfigLPBound = %.4f, want 1.5", got)
	}
}

// On random workloads the bounds are ordered — LPBound ≤ FitLPBound ≤ ConfigLPBound — and no
// bound is above the solver's plan.
func TestBoundsAreOrderedAndBelowAPlan(t *testing.T) {
	its := FakeInstanceTypes(30)
	shapes := []struct{ cpu, mem string }{{"250m", "512Mi"}, {"1500m", "1Gi"}, {"3", "2Gi"}, {"500m", "6Gi"}, {"7", "3Gi"}}
	for seed := range uint64(5) {
		rng := rand.New(rand.NewPCG(seed, seed))
		var pods []*corev1.Pod
		for _, sh := range shapes {
			for range rng.IntN(40) {
				pods = append(pods, Pod("p", sh.cpu, sh.mem, nil))
			}
		}
		lo, fit, conf := LPBound(its, pods), FitLPBound(its, pods), ConfigLPBound(its, pods, 30)
		plan := solver.Solve(solver.Input{Pods: pods, NodePools: []solver.NodePool{UnlimitedPool("p", its)}}, solver.Options{})
		if len(plan.Unschedulable) > 0 {
			t.Fatalf("seed %d: %d pods unplaced", seed, len(plan.Unschedulable))
		}
		t.Logf("seed %d: LP %.4f, fit %.4f, config %.4f, plan %.4f", seed, lo, fit, conf, plan.Price())
		if lo > fit+1e-9 || fit > conf+1e-6 || conf > plan.Price()+1e-6 {
			t.Errorf("seed %d: LP %.4f, fit %.4f, config %.4f, plan %.4f: want them in this order", seed, lo, fit, conf, plan.Price())
		}
	}
}
