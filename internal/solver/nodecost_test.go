package solver_test

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver"
)

// twoSizes are a small and a large type at almost the same price per resource: the small one
// is a little cheaper per CPU, so on instance prices alone many small machines win.
func twoSizes() []*cloudprovider.InstanceType {
	mk := func(name string, cpu int64, price float64) *cloudprovider.InstanceType {
		return cloudprovider.NewInstanceType(name,
			map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux},
			corev1.ResourceList{
				corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(cpu<<30, resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(10*cpu, resource.DecimalSI),
			}, nil,
			[]cloudprovider.Offering{{Zone: "zone-a", CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true}})
	}
	return []*cloudprovider.InstanceType{mk("small", 2, 0.019), mk("large", 32, 0.32)}
}

// A pool's per-node cost is part of every machine's price: with none, 64 pods buy sixteen small
// machines (0.304 $/h against 0.32 for one large); at 0.01 $/h per node the large one is
// cheaper (0.33 against 0.464) and is bought, and the plan's price counts the node cost.
func TestNodeCostMovesThePlanToFewerMachines(t *testing.T) {
	ps := pods(64, "web", "500m", "256Mi", nil)
	for _, tc := range []struct {
		cost      float64
		claims    int
		typ       string
		wantPrice float64
	}{
		{0, 16, "small", 16 * 0.019},
		{0.01, 1, "large", 0.32 + 0.01},
	} {
		pool := poolOf(twoSizes())
		pool.NodeCost = tc.cost
		r := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{pool}}, solver.Options{})
		wantAllPlaced(t, r)
		if len(r.NodeClaims) != tc.claims {
			t.Fatalf("node cost %v: %d claims, want %d", tc.cost, len(r.NodeClaims), tc.claims)
		}
		for _, nc := range r.NodeClaims {
			if got := nc.InstanceTypes[0].Name; got != tc.typ {
				t.Fatalf("node cost %v: a claim's cheapest type is %s, want %s", tc.cost, got, tc.typ)
			}
		}
		if math.Abs(r.Price()-tc.wantPrice) > 1e-9 {
			t.Fatalf("node cost %v: plan price %v, want %v", tc.cost, r.Price(), tc.wantPrice)
		}
	}
}
