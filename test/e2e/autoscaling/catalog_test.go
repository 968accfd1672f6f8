package autoscaling

import (
	"context"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/nodepools"
)

var catalogEntries, _ = catalog.Load()

// catalogCPU is an instance type's CPU count from the embedded catalog.
func catalogCPU(name string) resource.Quantity {
	for _, e := range catalogEntries {
		if e.Name == name {
			return resource.MustParse(e.Labels["karpenter.k8s.aws/instance-cpu"])
		}
	}
	return resource.Quantity{}
}

// simInstanceTypes are the types and prices the simulated cloud offers for a SimNodeClass.
func simInstanceTypes(snc *simv1alpha1.SimNodeClass) ([]*cloudprovider.InstanceType, error) {
	clk := clocktesting.NewFakeClock(time.Now())
	cloud, err := sim.NewCloud(clk, "")
	if err != nil {
		return nil, err
	}
	p, err := sim.NewProvider(s.Client, cloud, clk, nil)
	if err != nil {
		return nil, err
	}
	return p.InstanceTypes(context.Background(), snc)
}

// cheapestAllowed returns the price of the cheapest offering a claim's requirements allow and
// the price of the offering it launched.
func cheapestAllowed(nc karpv1.NodeClaim, its []*cloudprovider.InstanceType) (cheapest, launched float64) {
	reqs, err := nodepools.FromAPI(nc.Spec.Requirements)
	if err != nil {
		return 0, math.Inf(1)
	}
	cheapest, launched = math.Inf(1), math.Inf(1)
	for _, it := range its {
		if it.Requirements.Intersects(reqs) != nil {
			continue
		}
		for _, o := range it.Offerings {
			zone, hasZone := reqs.Get(karpv1.ZoneLabelKey)
			ct, hasCT := reqs.Get(karpv1.CapacityTypeLabelKey)
			if hasZone && !zone.Allows(o.Zone) || hasCT && !ct.Allows(o.CapacityType) {
				continue
			}
			cheapest = math.Min(cheapest, o.Price)
			if it.Name == nc.Labels[karpv1.InstanceTypeLabelKey] && o.Zone == nc.Labels[karpv1.ZoneLabelKey] &&
				o.CapacityType == nc.Labels[karpv1.CapacityTypeLabelKey] {
				launched = o.Price
			}
		}
	}
	return cheapest, launched
}
