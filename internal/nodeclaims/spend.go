package nodeclaims

import (
	"k8s.io/apimachinery/pkg/api/meta"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/spend"
)

// Spend is what a NodeClaim counts against a spending limit: once launched, the price of the
// offering it runs on (its instance type, zone and capacity type labels); before that, or when
// the types no longer offer it, the dearest offering of any type it may launch as.
func Spend(nc *karpv1.NodeClaim, types []*cloudprovider.InstanceType) float64 {
	if meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeLaunched) {
		if o := offering(types, nc.Labels[karpv1.InstanceTypeLabelKey], nc.Labels[karpv1.ZoneLabelKey], nc.Labels[karpv1.CapacityTypeLabelKey]); o != nil {
			return spend.Billed(o)
		}
	}
	reqs, err := nodepools.FromAPI(nc.Spec.Requirements)
	if err != nil {
		return 0
	}
	worst := 0.0
	for _, it := range Candidates(nc, types) {
		if p, ok := spend.WorstCase(it, reqs); ok {
			worst = max(worst, p)
		}
	}
	return worst
}
