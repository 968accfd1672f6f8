package replay_test

import (
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/replay"
)

// planningCase is where planning shows: two Deployments scaled down in three steps on spot
// machines (which consolidation can only delete), with the wait for scale-downs and the score of
// moves off. Between steps the kube-scheduler spreads the pods of each consolidation to the least
// allocated machines, which are the ones consolidation takes next unless planning marks them.
func planningCase(t *testing.T, opts disruptionplan.Options) (peak, end float64, r replay.Report) {
	t.Helper()
	opts.DisableScaleDownWait, opts.UnderutilizedK = true, -1
	return runScaleDown(t, caseNamed(t, "two-in-three-steps-spot"), karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
		replay.Config{Disruption: opts, Log: func(s string) { t.Log(s) }})
}

// Planning marks the nodes later rounds will remove (and the nodes budgets hold back), so that the
// pods of each consolidation go to the nodes that stay: fewer pods move, none twice, for no higher
// price.
func TestPlanningMovesFewerPodsAndEndsNoDearer(t *testing.T) {
	peak, baseAfter, without := planningCase(t, disruptionplan.Options{DisablePlanning: true})
	_, after, with := planningCase(t, disruptionplan.Options{})
	t.Logf("from %.3f $/h: without planning %.3f $/h, %d evictions; with planning %.3f $/h, %d evictions",
		peak, baseAfter, without.Evictions, after, with.Evictions)
	if with.Evictions >= without.Evictions {
		t.Errorf("planning evicted %d pods, %d without", with.Evictions, without.Evictions)
	}
	if after > baseAfter {
		t.Errorf("planning ended at %.3f $/h, %.3f without", after, baseAfter)
	}
	if with.Reevictions != 0 {
		t.Errorf("%d pods moved twice", with.Reevictions)
	}
	if after >= peak {
		t.Errorf("no saving: %.3f $/h at the peak, %.3f after", peak, after)
	}
}

// Without the churn guard nothing stops a pod from moving twice; planning is what keeps the
// moves down (the calm rules, which would refuse some of these moves, are off).
func TestPlanningWithoutTheChurnGuard(t *testing.T) {
	_, _, without := planningCase(t, disruptionplan.Options{DisablePlanning: true, EvictionMemory: time.Nanosecond})
	_, _, with := planningCase(t, disruptionplan.Options{EvictionMemory: time.Nanosecond})
	t.Logf("without planning %d evictions (%d twice); with planning %d (%d twice)", without.Evictions, without.Reevictions, with.Evictions, with.Reevictions)
	if with.Reevictions >= without.Reevictions || with.Evictions >= without.Evictions {
		t.Errorf("planning: %d evictions, %d moved twice; without: %d, %d", with.Evictions, with.Reevictions, without.Evictions, without.Reevictions)
	}
}
