package replay_test

import (
	"context"
	"math"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/replay"
)

// simCatalog is the simulated cloud's default catalog.
func simCatalog(t testing.TB) []*cloudprovider.InstanceType {
	p, err := sim.NewProvider(nil, nil, clocktesting.NewFakeClock(time.Time{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	its, err := p.InstanceTypes(context.Background(), &simv1alpha1.SimNodeClass{})
	if err != nil {
		t.Fatal(err)
	}
	return its
}

// onDemandPool is an amd64 on-demand pool with the policy, consolidateAfter 30s and a 10% budget.
func onDemandPool(policy karpv1.ConsolidationPolicy) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{
		{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
		{Key: karpv1.ArchLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.ArchitectureAmd64}},
	}
	np.Spec.Disruption = karpv1.Disruption{ConsolidateAfter: karpv1.NewDuration(30 * time.Second), ConsolidationPolicy: policy,
		Budgets: []karpv1.Budget{{Nodes: "10%"}}}
	return np
}

func constant(n int) func(time.Duration) int { return func(time.Duration) int { return n } }

func TestConsolidationSettlesAndThenStaysPut(t *testing.T) {
	c, err := replay.New(replay.Config{NodePool: onDemandPool(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized), InstanceTypes: simCatalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	deps := []replay.Deployment{
		{Name: "web", CPU: "500m", Memory: "1Gi", Replicas: constant(40)},
		// A batch that shrinks from 60 to 8 after ten minutes, leaving machines under-used.
		{Name: "batch", CPU: "1", Memory: "2Gi", Replicas: func(at time.Duration) int {
			if at < 10*time.Minute {
				return 60
			}
			return 8
		}},
	}
	c.Run(deps, 10*time.Minute)
	peak := c.Price()
	settled := c.Run(deps, 50*time.Minute)
	if settled.Commands[disruptionplan.MethodMultiNode]+settled.Commands[disruptionplan.MethodSingleNode]+settled.Commands[disruptionplan.MethodEmptiness] == 0 {
		t.Fatalf("no consolidation after the batch shrank: %+v", settled)
	}
	if c.Price() >= peak {
		t.Fatalf("price %.4f $/h after consolidation, %.4f at the peak", c.Price(), peak)
	}
	// Ten more minutes of the same workload: nothing moves.
	before := settled
	commands := func(r replay.Report) int {
		n := 0
		for _, v := range r.Commands {
			n += v
		}
		return n
	}
	quiet := c.Run(deps, 10*time.Minute)
	if d := commands(quiet) - commands(before); d != 0 || quiet.Evictions != before.Evictions {
		t.Fatalf("a steady workload saw %d more commands and %d more evictions in 10 minutes", d, quiet.Evictions-before.Evictions)
	}
	if math.IsNaN(quiet.CostHours) {
		t.Fatal("cost is NaN")
	}
}
