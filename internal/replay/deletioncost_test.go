package replay_test

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/replay"
)

// Calm scale-downs: with the wait for scale-downs in progress, deletion costs and moves priced
// against their evictions (with the falling load's bar), the pods a scale-down leaves are moved at
// most half as often as with all three off, for no higher price, and none twice. 1,000 pods scaled
// to 300: the wait alone keeps consolidation from moving pods onto the machines the scale-in just
// emptied (which then stay); two Deployments scaled down in three steps: the wait keeps
// consolidation from moving, between steps, pods the next step deletes, and deletion costs make
// each scale-in take the pods of the nodes consolidation would remove next. (1,000 pods scaled to
// 700 moves no pod even with the three off: consolidateAfter keeps moved pods off the machines the
// scale-in touched, TestMovedPodsStayOffMachinesInsideConsolidateAfter.)
func TestCalmRulesHalveTheMovesOfScaleDowns(t *testing.T) {
	cases := scaleDownCases()
	for _, tc := range []struct {
		sc     scaleDownCase
		policy karpv1.ConsolidationPolicy
	}{
		{cases[0], karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized},
		{cases[2], karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized},
		{cases[2], karpv1.ConsolidationPolicyBalanced},
	} {
		t.Run(tc.sc.name+"/"+string(tc.policy), func(t *testing.T) {
			_, offEnd, off := runScaleDown(t, tc.sc, tc.policy, replay.Config{Disruption: disruptionplan.Options{DisableScaleDownWait: true, UnderutilizedK: -1, CalmAfterScaleDown: -1}})
			_, onEnd, on := runScaleDown(t, tc.sc, tc.policy, replay.Config{PodDeletionCost: true})
			t.Logf("rules off: %.3f $/h, %d evictions; on: %.3f $/h, %d evictions", offEnd, off.Evictions, onEnd, on.Evictions)
			if 2*on.Evictions > off.Evictions || off.Evictions == 0 {
				t.Errorf("with the rules %d evictions, without %d: want at most half of a non-zero count", on.Evictions, off.Evictions)
			}
			if onEnd > offEnd {
				t.Errorf("with the rules the cluster ends at %.3f $/h, without at %.3f", onEnd, offEnd)
			}
			if on.Reevictions != 0 {
				t.Errorf("%d pods moved twice", on.Reevictions)
			}
		})
	}
}

// The replay writes deletion costs as the controller does, with Capstan's record of each value,
// so the decision core does not take them for users' eviction costs: a node ranked for removal
// must not look free to disrupt because Capstan ranked it.
func TestReplayedDeletionCostsAreCapstans(t *testing.T) {
	c, err := replay.New(replay.Config{NodePool: onDemandPool(karpv1.ConsolidationPolicyBalanced), InstanceTypes: simCatalog(t), PodDeletionCost: true})
	if err != nil {
		t.Fatal(err)
	}
	c.Run([]replay.Deployment{{Name: "web", CPU: "500m", Memory: "512Mi", Replicas: constant(40)}}, 5*time.Minute)
	ranked := 0
	for _, p := range c.Pods() {
		if _, has := p.Annotations[corev1.PodDeletionCost]; !has {
			continue
		}
		ranked++
		if o := pods.DeletionCostOf(p); o != pods.DeletionCostCapstan {
			t.Errorf("pod %s: deletion cost %q is owned by %v, want Capstan's", p.Name, p.Annotations[corev1.PodDeletionCost], o)
		}
		if v, ok := pods.UserEvictionCost(p); ok {
			t.Errorf("pod %s: the decision core reads a user eviction cost of %d from Capstan's ranking", p.Name, v)
		}
	}
	if ranked == 0 {
		t.Fatal("no pod was given a deletion cost")
	}
}
