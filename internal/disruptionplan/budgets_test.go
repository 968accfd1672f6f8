package disruptionplan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
)

// emptyPool is a pool of n empty nodes (and one busy one) with the budgets.
func emptyPool(t *testing.T, n int, budgets ...karpv1.Budget) *cluster {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) { np.Spec.Disruption.Budgets = budgets })
	c.node("default", "busy", "xl", karpv1.CapacityTypeOnDemand, pods("web", 16, "1")...)
	for i := range n {
		c.node("default", fmt.Sprintf("empty-%02d", i), "s", karpv1.CapacityTypeOnDemand)
	}
	return c
}

func TestBudgets(t *testing.T) {
	schedule := func(cron string, d time.Duration) karpv1.Budget {
		return karpv1.Budget{Nodes: "0", Schedule: &cron, Duration: &metav1.Duration{Duration: d}}
	}
	for _, tc := range []struct {
		name    string
		budgets []karpv1.Budget
		now     time.Time
		want    int
		blocked string
	}{
		// 10 empty nodes + 1 busy = 11 nodes; 20% of 11 rounds up to 3.
		{name: "percentage rounds up", budgets: []karpv1.Budget{{Nodes: "20%"}}, want: 3},
		{name: "count", budgets: []karpv1.Budget{{Nodes: "2"}}, want: 2},
		{name: "most restrictive wins", budgets: []karpv1.Budget{{Nodes: "5"}, {Nodes: "10%"}}, want: 2},
		{name: "zero freezes", budgets: []karpv1.Budget{{Nodes: "0"}}, want: 0, blocked: "budget nodes=0 for Empty"},
		{name: "no budgets is unlimited", want: 10},
		{name: "reasons scope a budget", budgets: []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonDrifted}}}, want: 10},
		{name: "reasons that match", budgets: []karpv1.Budget{{Nodes: "1", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonEmpty}}}, want: 1},
		// 09:00–17:00 UTC on weekdays, nothing is disrupted; t0 is Monday 10:00.
		{name: "schedule window open", budgets: []karpv1.Budget{schedule("0 9 * * mon-fri", 8*time.Hour)}, want: 0,
			blocked: "budget nodes=0 for Empty until 17:00 UTC"},
		{name: "schedule window closed", budgets: []karpv1.Budget{schedule("0 9 * * mon-fri", 8*time.Hour)},
			now: time.Date(2026, 11, 30, 17, 0, 0, 0, time.UTC), want: 10},
		{name: "schedule before window", budgets: []karpv1.Budget{schedule("0 9 * * mon-fri", 8*time.Hour)},
			now: time.Date(2026, 11, 30, 8, 59, 0, 0, time.UTC), want: 10},
		{name: "schedule on a weekend", budgets: []karpv1.Budget{schedule("0 9 * * mon-fri", 8*time.Hour)},
			now: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC), want: 10},
		{name: "unreadable schedule fails closed", budgets: []karpv1.Budget{{Nodes: "5", Schedule: new("61 * * * *"), Duration: &metav1.Duration{Duration: time.Hour}}},
			want: 0, blocked: "minute field"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := emptyPool(t, 10, tc.budgets...)
			if !tc.now.IsZero() {
				c.snap.Now = tc.now
			}
			d := c.decide(disruptionplan.Options{})
			if got := len(names(d.Command)); got != tc.want {
				t.Fatalf("disrupted %d nodes, want %d", got, tc.want)
			}
			if tc.blocked != "" {
				ev, msg := explanation(d, "empty-00")
				if ev != disruptionplan.EventDisruptionBlocked || !strings.Contains(msg, tc.blocked) {
					t.Errorf("explanation = %s %q, want it to contain %q", ev, msg, tc.blocked)
				}
			}
		})
	}
}

func TestNodesBeingDisruptedUseTheBudget(t *testing.T) {
	c := emptyPool(t, 4, karpv1.Budget{Nodes: "3"})
	// One node is being deleted, one is not Ready: one disruption is left.
	c.snap.Nodes[1].NodeClaim.DeletionTimestamp = &metav1.Time{Time: t0}
	c.snap.Nodes[2].Node.Status.Conditions[0].Status = corev1.ConditionFalse
	d := c.decide(disruptionplan.Options{})
	if got := names(d.Command); len(got) != 1 {
		t.Fatalf("disrupted %v, want one node", got)
	}
	if a := d.Allowances["default"][karpv1.DisruptionReasonEmpty]; a.Allowed != 1 || a.Limit != 3 {
		t.Errorf("allowance = %+v, want 1 of 3", a)
	}
}

func TestStartingNodesDoNotInflateAPercentage(t *testing.T) {
	c := emptyPool(t, 9, karpv1.Budget{Nodes: "10%"})
	for _, n := range c.snap.Nodes {
		n.NodeClaim.Status.Conditions = append(n.NodeClaim.Status.Conditions,
			metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	}
	// 10 nodes → 1; ten more still starting must not make it 2.
	for i := range 10 {
		starting(c.node("default", fmt.Sprintf("starting-%d", i), "s", karpv1.CapacityTypeOnDemand), time.Minute)
	}
	d := c.decide(disruptionplan.Options{})
	if got := names(d.Command); len(got) != 1 || d.Command.Method != disruptionplan.MethodDrift {
		t.Fatalf("disrupted %v, want one drifted node (10%% of 10 initialized)", got)
	}
}

func TestDriftBudgetOnlyLimitsDrift(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) {
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0", Reasons: []karpv1.DisruptionReason{karpv1.DisruptionReasonDrifted}}}
	})
	drifted := c.node("default", "drifted", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "6"))
	meta.RemoveStatusCondition(&drifted.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	drifted.NodeClaim.Status.Conditions = append(drifted.NodeClaim.Status.Conditions,
		metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	c.node("default", "empty", "s", karpv1.CapacityTypeOnDemand)
	d := c.decide(disruptionplan.Options{})
	if got := names(d.Command); len(got) != 1 || got[0] != "empty" {
		t.Fatalf("command = %v, want only the empty node", got)
	}
	// Once it is gone, drift is still frozen.
	c.snap.Nodes = c.snap.Nodes[:1]
	d = c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none: drift budget is 0", names(d.Command))
	}
	if _, msg := explanation(d, "drifted"); !strings.Contains(msg, "budget nodes=0 for Drifted") {
		t.Errorf("explanation = %q", msg)
	}
}
