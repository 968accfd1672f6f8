package solver_test

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// The fake cloud provider's instance types exactly as Karpenter v1.15.0's fake.NewInstanceType
// builds them (pkg/cloudprovider/fake/instancetype.go), facts restated here: resources default
// to 4 CPU, 4Gi and 5 pods; offerings spot in test-zone-1 and -2 and on-demand in test-zone-1
// to -3, each at 0.1 per CPU plus 0.1 per GB (10^9 bytes) of memory plus 1.0 per GPU of either
// vendor; arch amd64 unless given; OS linux, windows and darwin unless given; the labels "size"
// (large when over 4 CPU and 8Gi, else small), "special" (optional on large types, absent on
// the others) and "integer" (the CPU count); 100m CPU and 10Mi reserved. The suite's NodePool
// (test.NodePool) has a CPU limit of 2000.
const (
	labelSize    = "size"
	labelSpecial = "special"
	labelInteger = "integer"
)

// karpenterPool is the scheduling suite's NodePool as test.NodePool makes it: no requirements,
// and a limit of 2000 CPU.
func karpenterPool(its []*cloudprovider.InstanceType) solver.NodePool {
	pool := poolOf(its)
	pool.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2000")}
	return pool
}

func karpenterType(name string, res corev1.ResourceList, arch string, oses ...string) *cloudprovider.InstanceType {
	if res == nil {
		res = corev1.ResourceList{}
	}
	for n, def := range map[corev1.ResourceName]string{corev1.ResourceCPU: "4", corev1.ResourceMemory: "4Gi", corev1.ResourcePods: "5"} {
		if q := res[n]; q.IsZero() {
			res[n] = resource.MustParse(def)
		}
	}
	if arch == "" {
		arch = karpv1.ArchitectureAmd64
	}
	if len(oses) == 0 {
		oses = []string{"linux", "windows", "darwin"}
	}
	price := 0.0
	for n, q := range res {
		switch n {
		case corev1.ResourceCPU:
			price += 0.1 * q.AsApproximateFloat64()
		case corev1.ResourceMemory:
			price += 0.1 * q.AsApproximateFloat64() / 1e9
		case "fake.com/vendor-a", "fake.com/vendor-b":
			price++
		}
	}
	var offerings []cloudprovider.Offering
	for z := 1; z <= 3; z++ {
		if z <= 2 {
			offerings = append(offerings, cloudprovider.Offering{Zone: fmt.Sprintf("test-zone-%d", z), CapacityType: karpv1.CapacityTypeSpot, Price: price, Available: true})
		}
		offerings = append(offerings, cloudprovider.Offering{Zone: fmt.Sprintf("test-zone-%d", z), CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true})
	}
	it := cloudprovider.NewInstanceType(name, map[string]string{karpv1.ArchLabelKey: arch}, res,
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("10Mi")}, offerings)
	it.Requirements.Add(requirements.MustNew(karpv1.OSLabelKey, requirements.In, oses...))
	it.Requirements.Add(requirements.MustNew(labelInteger, requirements.In, fmt.Sprint(res.Cpu().Value())))
	if res.Cpu().Cmp(resource.MustParse("4")) > 0 && res.Memory().Cmp(resource.MustParse("8Gi")) > 0 {
		it.Requirements.Add(requirements.MustNew(labelSize, requirements.In, "large"))
		it.Requirements.Add(requirements.MustNew(labelSpecial, requirements.In, "optional"))
	} else {
		it.Requirements.Add(requirements.MustNew(labelSize, requirements.In, "small"))
		it.Requirements.Add(requirements.MustNew(labelSpecial, requirements.DoesNotExist))
	}
	return it
}

// karpenterDefaultTypes are the fake provider's six default types.
func karpenterDefaultTypes() []*cloudprovider.InstanceType {
	return []*cloudprovider.InstanceType{
		karpenterType("default-instance-type", nil, ""),
		karpenterType("small-instance-type", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("2Gi")}, ""),
		karpenterType("gpu-vendor-instance-type", corev1.ResourceList{"fake.com/vendor-a": resource.MustParse("2")}, ""),
		karpenterType("gpu-vendor-b-instance-type", corev1.ResourceList{"fake.com/vendor-b": resource.MustParse("2")}, ""),
		karpenterType("arm-instance-type", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("128Gi")},
			karpv1.ArchitectureArm64, "ios", "linux", "windows", "darwin"),
		karpenterType("single-pod-instance-type", corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}, ""),
	}
}

// claimTypes names a claim's instance types in its order.
func claimTypes(nc *solver.PlannedNodeClaim) string {
	var names []string
	for _, it := range nc.InstanceTypes {
		names = append(names, it.Name)
	}
	return strings.Join(names, ",")
}

// "should launch pods with different instance type node selectors on different instances", with
// the fake provider's six default types exactly: each pod's claim launches only the type it
// selects (one through the deprecated beta label, one through the stable label).
func TestUpstreamDifferentInstanceTypeSelectorsGetDifferentMachines(t *testing.T) {
	pool := karpenterPool(karpenterDefaultTypes())
	pool.Requirements.Add(requirements.MustNew(karpv1.ArchLabelKey, requirements.In, karpv1.ArchitectureArm64, karpv1.ArchitectureAmd64))
	pods := []*corev1.Pod{
		upstreamPod("beta", map[string]string{corev1.LabelInstanceType: "small-instance-type"}),
		upstreamPod("stable", map[string]string{corev1.LabelInstanceTypeStable: "default-instance-type"}),
	}
	r := solve(t, solver.Input{Pods: pods, NodePools: []solver.NodePool{pool}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 2 {
		t.Fatalf("%d claims, want one per pod", len(r.NodeClaims))
	}
	for _, nc := range r.NodeClaims {
		want := map[string]string{"beta": "small-instance-type", "stable": "default-instance-type"}[nc.Pods[0].Name]
		if got := claimTypes(nc); len(nc.Pods) != 1 || got != want {
			t.Errorf("the claim of %d pod(s), first %s, may launch %s; want only %s", len(nc.Pods), nc.Pods[0].Name, got, want)
		}
	}
}

// "should select for valid instance types, regardless of price", with the types exactly as the
// spec builds them through fake.NewInstanceType: medium (2 CPU, 2Gi, $3), small (1, 1Gi, $2),
// large (4, 4Gi, $1), one on-demand offering each in test-zone-1a, and the fake's labels. A pod
// of 1m and 1Mi: its claim lists all three, cheapest first.
func TestUpstreamValidInstanceTypesRegardlessOfPrice(t *testing.T) {
	typ := func(name, cpu, mem string, price float64) *cloudprovider.InstanceType {
		it := karpenterType(name, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}, "")
		it.Offerings = []cloudprovider.Offering{{Zone: "test-zone-1a", CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true}}
		it.Requirements.Set(requirements.MustNew(karpv1.ZoneLabelKey, requirements.In, "test-zone-1a"))
		it.Requirements.Set(requirements.MustNew(karpv1.CapacityTypeLabelKey, requirements.In, karpv1.CapacityTypeOnDemand))
		return it
	}
	pool := karpenterPool([]*cloudprovider.InstanceType{typ("medium", "2", "2Gi", 3), typ("small", "1", "1Gi", 2), typ("large", "4", "4Gi", 1)})
	p := upstreamPod("pod", nil)
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1m"), corev1.ResourceMemory: resource.MustParse("1Mi")}
	r := solve(t, solver.Input{Pods: []*corev1.Pod{p}, NodePools: []solver.NodePool{pool}}, solver.Options{})
	wantAllPlaced(t, r)
	if len(r.NodeClaims) != 1 {
		t.Fatalf("%d claims, want 1", len(r.NodeClaims))
	}
	if got := claimTypes(r.NodeClaims[0]); got != "large,small,medium" {
		t.Fatalf("claim's types %s, want large,small,medium (every valid type, cheapest first)", got)
	}
}
