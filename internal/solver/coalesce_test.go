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

// The burst tie-break: at equal price per CPU a burst is spread over machines of about an eighth
// of its CPU (a scale-in that empties machines in order then stops inside a small one), for no
// more than a plan of the largest machines. (A pool whose CPU limit may bind keeps the largest
// near-tied machines: TestLimitsHoldWhicheverCandidateLaunchesAndRefuseOnlyWhenFull fails
// without that.)
func TestBurstSpreadOverMachinesOfAnEighth(t *testing.T) {
	pool := c6aOnDemand(t)
	in := solver.Input{Pods: pods(1000, "web", "250m", "256Mi", nil), NodePools: []solver.NodePool{pool}}
	plan := func(r *solver.Result) (price, largest float64) {
		t.Helper()
		wantAllPlaced(t, r)
		for _, nc := range r.NodeClaims {
			price += nc.Price
			alloc := nc.InstanceTypes[0].Allocatable()
			largest = max(largest, alloc.Cpu().AsApproximateFloat64())
		}
		return price, largest
	}
	price, largest := plan(solve(t, in, solver.Options{}))
	// The burst is 250 CPU; c6a.4xlarge (15.9 allocatable) is not a near-tie of the c6a.8xlarge
	// (31.9) per usable CPU, so the 8xlarge is the size an eighth comes to.
	if largest > 32 {
		t.Errorf("the burst's largest machine has %.2f CPU; want at most a c6a.8xlarge (31.85) for 250 CPU of pods", largest)
	}
	big := c6aOnDemand(t)
	big.Requirements.Add(requirements.MustNew("karpenter.k8s.aws/instance-cpu", requirements.Gt, "100"))
	bigPrice, bigLargest := plan(solve(t, solver.Input{Pods: in.Pods, NodePools: []solver.NodePool{big}}, solver.Options{}))
	if bigLargest < 100 || price > bigPrice*1.005 {
		t.Errorf("the spread burst costs %.3f $/h; a plan of machines over 100 CPU (largest %.2f) costs %.3f", price, bigLargest, bigPrice)
	}
	// LargestAtTies, the rule before, fills towards the largest near-tie.
	if _, l := plan(solve(t, in, solver.Options{LargestAtTies: true})); l < 100 {
		t.Errorf("with LargestAtTies the burst's largest machine has %.2f CPU; want the largest near-tie (over 100)", l)
	}
}

// kwokLinear is the pool of workload.KWOKMenu's c types (n vCPU for n from 1 to 96, 2 GiB per
// vCPU, 100m and 10Mi reserved per node as the kwok provider does, priced in proportion to n),
// spot in zone-a: the shape of the menu of the side-by-side with Karpenter.
func kwokLinear(t *testing.T) solver.NodePool {
	t.Helper()
	its, err := workload.KWOKMenu(workload.MenuFamily{Name: "c", GiBPerCPU: 2, PricePerCPU: 0.04})
	if err != nil {
		t.Fatal(err)
	}
	p := poolOf(its)
	p.Requirements.Add(requirements.Single(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeSpot))
	p.Requirements.Add(requirements.Single(zoneKey, "zone-a"))
	return p
}

// The per-node reservation makes a smaller machine a fraction of a percent less efficient than a
// larger one at a linear price; that fraction does not decide a burst's shape. 100 pods of 1 CPU
// and 600 of 250m (250 CPU) fill a 32-vCPU machine (the eighth) to 0.52% less per dollar than a
// 96-vCPU one: the burst is of machines of at most 32 vCPU, and costs within 1% of the plan that
// takes the largest near-tie.
func TestReservationFractionsDoNotDecideTheBurstShape(t *testing.T) {
	in := solver.Input{Pods: append(pods(100, "large", "1", "1Gi", nil), pods(600, "small", "250m", "256Mi", nil)...),
		NodePools: []solver.NodePool{kwokLinear(t)}}
	var price, largest float64
	r := solve(t, in, solver.Options{})
	wantAllPlaced(t, r)
	sizes := map[string]int{}
	for _, nc := range r.NodeClaims {
		price += nc.Price
		sizes[nc.InstanceTypes[0].Name]++
		largest = max(largest, nc.InstanceTypes[0].Capacity.Cpu().AsApproximateFloat64())
	}
	if largest > 32 {
		t.Errorf("the burst is %v; want no machine over 32 vCPU for 250 CPU of pods", sizes)
	}
	var widest float64
	wide := solve(t, in, solver.Options{LargestAtTies: true})
	wantAllPlaced(t, wide)
	for _, nc := range wide.NodeClaims {
		widest += nc.Price
	}
	if price > widest*1.01 {
		t.Errorf("the burst %v costs %.3f $/h; the largest near-ties' %.3f", sizes, price, widest)
	}
}
