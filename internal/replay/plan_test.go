package replay_test

import (
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/replay"
)

// scaleDown is the side-by-side workload with Karpenter: 1,000 pods of 250m/256Mi on large
// machines (more than 15 vCPU), scaled to 300 after ten minutes; then 20 minutes of
// consolidation under a 10% budget (one node at a time here).
func scaleDown(t *testing.T, opts disruptionplan.Options) (before, after float64, r replay.Report) {
	return scaleDownWith(t, karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, replay.Config{Disruption: opts})
}

// scaleDownWith is scaleDown under the policy, with the configuration's options (its pool and
// catalog are set here).
func scaleDownWith(t *testing.T, policy karpv1.ConsolidationPolicy, cfg replay.Config) (before, after float64, r replay.Report) {
	t.Helper()
	np := onDemandPool(policy)
	np.Spec.Template.Spec.Requirements = append(np.Spec.Template.Spec.Requirements,
		karpv1.NodeSelectorRequirementWithMinValues{Key: "karpenter.k8s.aws/instance-cpu", Operator: karpv1.NodeSelectorOpGt, Values: []string{"15"}})
	cfg.NodePool, cfg.InstanceTypes, cfg.Log = np, simCatalog(t), func(s string) { t.Log(s) }
	c, err := replay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deps := []replay.Deployment{{Name: "web", CPU: "250m", Memory: "256Mi", Replicas: func(at time.Duration) int {
		if at < 10*time.Minute {
			return 1000
		}
		return 300
	}}}
	c.Run(deps, 10*time.Minute)
	before = c.Price()
	r = c.Run(deps, 20*time.Minute)
	return before, c.Price(), r
}

// The kube-scheduler spreads pods to the least allocated nodes: without planning (and without the
// wait for the scale-down, which alone avoids most of this, and the score of moves), the pods of the
// first consolidation land on the node the scale-down just emptied, which then stays, and every
// pod moves. Planning marks that node (and the nodes budgets hold back) so that pods go to the
// nodes that stay.
func TestPlanningMovesFewerPodsAndEndsCheaper(t *testing.T) {
	base, baseAfter, without := scaleDown(t, disruptionplan.Options{DisablePlanning: true, DisableScaleDownWait: true, UnderutilizedK: -1})
	_, after, with := scaleDown(t, disruptionplan.Options{DisableScaleDownWait: true, UnderutilizedK: -1})
	t.Logf("from %.3f $/h: without planning %.3f $/h, %d evictions; with planning %.3f $/h, %d evictions",
		base, baseAfter, without.Evictions, after, with.Evictions)
	if with.Evictions >= without.Evictions {
		t.Errorf("planning evicted %d pods, %d without", with.Evictions, without.Evictions)
	}
	if after > baseAfter {
		t.Errorf("planning ended at %.3f $/h, %.3f without", after, baseAfter)
	}
	if with.Reevictions != 0 {
		t.Errorf("%d pods moved twice", with.Reevictions)
	}
	if after >= base {
		t.Errorf("no saving: %.3f $/h before, %.3f after", base, after)
	}
}

// Without the churn guard nothing stops a pod from moving twice; planning is what keeps the
// moves down (the calm rules, which would refuse some of these moves, are off).
func TestPlanningWithoutTheChurnGuard(t *testing.T) {
	_, _, without := scaleDown(t, disruptionplan.Options{DisablePlanning: true, EvictionMemory: time.Nanosecond, DisableScaleDownWait: true, UnderutilizedK: -1})
	_, _, with := scaleDown(t, disruptionplan.Options{EvictionMemory: time.Nanosecond, DisableScaleDownWait: true, UnderutilizedK: -1})
	t.Logf("without planning %d evictions (%d twice); with planning %d (%d twice)", without.Evictions, without.Reevictions, with.Evictions, with.Reevictions)
	if with.Reevictions >= without.Reevictions || with.Evictions >= without.Evictions {
		t.Errorf("planning: %d evictions, %d moved twice; without: %d, %d", with.Evictions, with.Reevictions, without.Evictions, without.Reevictions)
	}
}
