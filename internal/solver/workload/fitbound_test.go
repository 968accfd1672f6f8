package workload

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
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
