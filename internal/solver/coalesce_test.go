package solver_test

import (
	"strings"
	"testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// c6aOnDemand is the pool of the embedded EC2 catalog's c6a types of 16 vCPU or more (as the
// replayed scale-downs' pool), on demand, whose prices are linear in size: one 8xlarge costs what
// two 4xlarge do.
func c6aOnDemand(t *testing.T) solver.NodePool {
	t.Helper()
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		t.Fatal(err)
	}
	var c6a []*cloudprovider.InstanceType
	for _, it := range its {
		if strings.HasPrefix(it.Name, "c6a.") && it.Name != "c6a.metal" && cpus(it) >= 16 {
			c6a = append(c6a, it)
		}
	}
	p := poolOf(c6a)
	p.Requirements.Add(requirements.Single(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeOnDemand))
	return p
}

// The burst tie-break: 100 small pods fill one c6a.4xlarge (63 pods) and leave 37 for a second
// one; a c6a.8xlarge holds all 100 for the same price. By default the plan keeps the packing's two
// machines (smaller machines are emptied whole by a later scale-in); with FewerMachines it buys
// the one machine, and never pays more than half a percent for it.
func TestFewerMachinesAtEqualPrice(t *testing.T) {
	pool := c6aOnDemand(t)
	in := solver.Input{Pods: pods(100, "web", "250m", "256Mi", nil), NodePools: []solver.NodePool{pool}}
	def := solve(t, in, solver.Options{})
	wantAllPlaced(t, def)
	fewer := solve(t, in, solver.Options{FewerMachines: true})
	wantAllPlaced(t, fewer)
	price := func(r *solver.Result) float64 {
		sum := 0.0
		for _, nc := range r.NodeClaims {
			sum += nc.Price
		}
		return sum
	}
	if len(def.NodeClaims) != 2 || def.NodeClaims[0].InstanceTypes[0].Name != "c6a.4xlarge" {
		t.Fatalf("default plan: %d claims, first cheapest %s; want two c6a.4xlarge", len(def.NodeClaims), def.NodeClaims[0].InstanceTypes[0].Name)
	}
	if len(fewer.NodeClaims) != 1 || fewer.NodeClaims[0].InstanceTypes[0].Name != "c6a.8xlarge" || len(fewer.NodeClaims[0].Pods) != 100 {
		t.Fatalf("FewerMachines plan: %d claims, first cheapest %s; want one c6a.8xlarge with the 100 pods", len(fewer.NodeClaims), fewer.NodeClaims[0].InstanceTypes[0].Name)
	}
	if price(fewer) > price(def)*1.005 {
		t.Fatalf("FewerMachines costs %.3f $/h against %.3f", price(fewer), price(def))
	}
	// A merge that would cost more is not taken: 400 pods are a 24xlarge and a 4xlarge, and the
	// one machine holding them all (a 32xlarge) costs more than both.
	in.Pods = pods(400, "web", "250m", "256Mi", nil)
	if r := solve(t, in, solver.Options{FewerMachines: true}); len(r.NodeClaims) != 2 || price(r) > price(solve(t, in, solver.Options{}))+1e-9 {
		t.Fatalf("400 pods with FewerMachines: %d claims at %.3f $/h; want the default's two", len(r.NodeClaims), price(r))
	}
}
