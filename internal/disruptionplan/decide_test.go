package disruptionplan_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/provreq"
)

func TestEmptyNodesGoInOneCommand(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "busy", "l", karpv1.CapacityTypeOnDemand, pods("web", 7, "1")...)
	c.node("default", "empty-1", "m", karpv1.CapacityTypeOnDemand)
	c.node("default", "empty-2", "s", karpv1.CapacityTypeOnDemand)
	d := c.decide(disruptionplan.Options{})
	if d.Command == nil || d.Command.Method != disruptionplan.MethodEmptiness {
		t.Fatalf("command = %+v, want emptiness", d.Command)
	}
	if got := names(d.Command); !slices.Equal(got, []string{"empty-1", "empty-2"}) {
		t.Errorf("candidates = %v, want the two empty nodes", got)
	}
	if len(d.Command.Replacements) != 0 || math.Abs(d.Command.PriceBefore-0.15) > 1e-9 {
		t.Errorf("replacements %d, price before %v; want none and 0.15", len(d.Command.Replacements), d.Command.PriceBefore)
	}
}

func TestDaemonSetAndFinishedPodsDoNotKeepANodeBusy(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	ds := pod("agent", "agent", "100m")
	ds.OwnerReferences[0].Kind = "DaemonSet"
	done := pod("job", "job", "1")
	n := c.node("default", "n", "m", karpv1.CapacityTypeOnDemand, ds, done)
	done.Status.Phase = corev1.PodSucceeded
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{n.Name()}) {
		t.Fatalf("command = %v, want the node with only a DaemonSet pod and a finished pod deleted", names(d.Command))
	}
}

func TestEmptyNodeWaitsForConsolidatable(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	n := c.node("default", "fresh", "m", karpv1.CapacityTypeOnDemand)
	meta.RemoveStatusCondition(&n.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none before consolidateAfter", names(d.Command))
	}
	if ev, msg := explanation(d, "fresh"); ev != "" || !strings.Contains(msg, "not consolidatable yet") {
		t.Errorf("explanation = %q %q, want a quiet 'not consolidatable yet'", ev, msg)
	}
}

func TestBlockers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(c *cluster, n *disruptionplan.Node)
		want  string
	}{
		{"pod do-not-disrupt", func(c *cluster, n *disruptionplan.Node) {
			n.Pods[0].Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
		}, "pod default/web-0 has karpenter.sh/do-not-disrupt"},
		{"node do-not-disrupt", func(c *cluster, n *disruptionplan.Node) {
			n.Node.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
		}, "node big has karpenter.sh/do-not-disrupt"},
		{"pdb at zero", func(c *cluster, n *disruptionplan.Node) { c.pdb("web", 0) }, "pdb default/web allows no disruption"},
		{"two pdbs", func(c *cluster, n *disruptionplan.Node) {
			c.pdb("web", 1)
			c.pdb("web", 1)
			c.snap.PDBs[1].Name = "web-too"
		}, "covered by 2 PodDisruptionBudgets"},
		{"no controller", func(c *cluster, n *disruptionplan.Node) { n.Pods[0].OwnerReferences = nil }, "pod default/web-0 has no controller"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.pool("default", nil)
			// One pod on a large machine: a small one would do.
			n := c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("web-0", "web", "1"))
			tc.setup(c, n)
			d := c.decide(disruptionplan.Options{})
			if d.Command != nil {
				t.Fatalf("command = %v %v, want none", d.Command.Method, names(d.Command))
			}
			if _, msg := explanation(d, "big"); !strings.Contains(msg, tc.want) {
				t.Errorf("explanation = %q, want it to name %q", msg, tc.want)
			}
		})
	}
}

// The Eviction API evicts a pod that is not Ready whatever its budget's disruptionsAllowed when
// the budget's unhealthyPodEvictionPolicy is AlwaysAllow, or while its healthy pods are as many as
// it wants (IfHealthyBudget, the default), and a Pending pod always: consolidation counts on those
// evictions as the drain will get them (Karpenter v1.15's disruption suite: AlwaysAllow with pods
// not Ready). A Ready pod, or an unhealthy one under a budget short of healthy pods, still blocks.
func TestPDBLetsThePodsTheEvictionAPIEvicts(t *testing.T) {
	always := policyv1.AlwaysAllow
	notReady := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	}
	ready := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	for _, tc := range []struct {
		name    string
		pod     func(*corev1.Pod)
		pdb     func(*policyv1.PodDisruptionBudget)
		blocked bool
	}{
		{"not Ready, AlwaysAllow", notReady, func(b *policyv1.PodDisruptionBudget) { b.Spec.UnhealthyPodEvictionPolicy = &always }, false},
		{"Ready, AlwaysAllow", ready, func(b *policyv1.PodDisruptionBudget) { b.Spec.UnhealthyPodEvictionPolicy = &always }, true},
		{"not Ready, IfHealthyBudget, healthy as wanted", notReady, func(b *policyv1.PodDisruptionBudget) {
			b.Status.CurrentHealthy, b.Status.DesiredHealthy = 2, 2
		}, false},
		{"not Ready, IfHealthyBudget, short of healthy pods", notReady, func(b *policyv1.PodDisruptionBudget) {
			b.Status.CurrentHealthy, b.Status.DesiredHealthy = 1, 2
		}, true},
		{"Pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			c.pool("default", nil)
			n := c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("web-0", "web", "1"))
			tc.pod(n.Pods[0])
			c.pdb("web", 0)
			if tc.pdb != nil {
				tc.pdb(c.snap.PDBs[0])
			}
			d := c.decide(disruptionplan.Options{})
			if tc.blocked {
				if d.Command != nil {
					t.Fatalf("command %v, want the PDB to hold the node", names(d.Command))
				}
				if _, msg := explanation(d, "big"); !strings.Contains(msg, "pdb default/web allows no disruption") {
					t.Errorf("explanation = %q, want the PDB named", msg)
				}
				return
			}
			if d.Command == nil {
				_, msg := explanation(d, "big")
				t.Fatalf("no command (%q); the Eviction API would evict the pod", msg)
			}
		})
	}
}

func TestPDBWithRoomDoesNotBlock(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("web-0", "web", "1"))
	c.pdb("web", 1)
	if d := c.decide(disruptionplan.Options{}); d.Command == nil {
		t.Fatal("no command; a PDB that allows a disruption must not block")
	}
}

func TestReplaceWithCheaperMachine(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "500m"), pod("b", "web", "500m"))
	d := c.decide(disruptionplan.Options{})
	cmd := d.Command
	if cmd == nil || cmd.Method != disruptionplan.MethodSingleNode || len(cmd.Replacements) != 1 {
		t.Fatalf("command = %+v, want a single-node replacement", cmd)
	}
	r := cmd.Replacements[0]
	if r.InstanceTypes[0].Name != "s" || cmd.PriceAfter >= cmd.PriceBefore {
		t.Errorf("replacement %s at %v for %v; want s, cheaper", r.InstanceTypes[0].Name, cmd.PriceAfter, cmd.PriceBefore)
	}
	// The claim launched from the plan allows no type the narrowing dropped.
	if its, ok := r.Requirements.Get(karpv1.InstanceTypeLabelKey); !ok || its.Allows("l") || its.Allows("xl") || !its.Allows("s") {
		t.Errorf("replacement requirements allow %v, want the cheaper types only", its)
	}
	for _, it := range r.InstanceTypes {
		for _, o := range it.Offerings {
			if ct, _ := r.Requirements.Get(karpv1.CapacityTypeLabelKey); ct.Allows(o.CapacityType) && o.Price >= cmd.PriceBefore {
				t.Errorf("replacement may launch %s %s at %v, not cheaper than %v", it.Name, o.CapacityType, o.Price, cmd.PriceBefore)
			}
		}
	}
}

func TestNotCheaperIsExplained(t *testing.T) {
	c := newCluster(t)
	// On-demand only: otherwise the same type on spot would be cheaper.
	c.pool("default", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
			Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	})
	c.node("default", "small", "s", karpv1.CapacityTypeOnDemand, pod("a", "web", "1500m"))
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none", names(d.Command))
	}
	ev, msg := explanation(d, "small")
	if ev != disruptionplan.EventUnconsolidatable || !strings.Contains(msg, "is not cheaper than $0.0500/h") {
		t.Errorf("explanation = %s %q", ev, msg)
	}
}

func TestSpotIsReplacedOnlyBySpotWithTheGate(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "spot", "l", karpv1.CapacityTypeSpot, pod("a", "web", "1"))
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none without SpotToSpotConsolidation", names(d.Command))
	}
	if _, msg := explanation(d, "spot"); !strings.Contains(msg, "SpotToSpotConsolidation is disabled") {
		t.Errorf("explanation = %q", msg)
	}
	// With the gate, fewer than 15 cheaper spot types (the fixture has 2) is still no.
	d = c.decide(disruptionplan.Options{SpotToSpotConsolidation: true})
	if _, msg := explanation(d, "spot"); d.Command != nil || !strings.Contains(msg, "needs 15 spot types") {
		t.Errorf("command %v, explanation %q; want none for want of 15 cheaper spot types", names(d.Command), msg)
	}
}

func TestSpotToSpotWithEnoughTypes(t *testing.T) {
	c := newCluster(t)
	// 20 more spot shapes, all cheaper than the node's.
	for i := range 20 {
		s := shape{name: "tiny-" + string(rune('a'+i)), cpu: 2, gib: 4, od: 0.05 + float64(i)/1000, spotP: 0.01 + float64(i)/1000}
		shapes = append(shapes, s)
	}
	defer func() { shapes = shapes[:4] }()
	c.its = catalog()
	c.pool("default", nil)
	c.node("default", "spot", "l", karpv1.CapacityTypeSpot, pod("a", "web", "1"))
	d := c.decide(disruptionplan.Options{SpotToSpotConsolidation: true})
	if d.Command == nil || len(d.Command.Replacements) != 1 {
		t.Fatalf("command = %+v, want a spot replacement", d.Command)
	}
	r := d.Command.Replacements[0]
	ct, _ := r.Requirements.Get(karpv1.CapacityTypeLabelKey)
	if ct.Allows(karpv1.CapacityTypeOnDemand) || !ct.Allows(karpv1.CapacityTypeSpot) {
		t.Errorf("replacement capacity types %s, want spot only", ct.String())
	}
	if len(r.InstanceTypes) != disruptionplan.MinSpotToSpotTypes {
		t.Errorf("replacement has %d types, want the %d cheapest", len(r.InstanceTypes), disruptionplan.MinSpotToSpotTypes)
	}
}

func TestMultiNodeFindsCombinationBeyondThePrefix(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	// Three large machines with one small pod each. b's pod needs a label only b has, so b
	// cannot go; a's and c's pods both fit in b's room.
	c.node("default", "a", "l", karpv1.CapacityTypeOnDemand, pod("pa", "x", "500m"))
	b := c.node("default", "b", "l", karpv1.CapacityTypeOnDemand, pod("pb", "y", "500m"))
	b.Node.Labels = map[string]string{"special": "true"}
	for k, v := range c.snap.Nodes[0].Node.Labels {
		if _, ok := b.Node.Labels[k]; !ok && k != corev1.LabelHostname {
			b.Node.Labels[k] = v
		}
	}
	b.Node.Labels[corev1.LabelHostname] = "b"
	b.Pods[0].Spec.NodeSelector = map[string]string{"special": "true"}
	c.node("default", "c", "l", karpv1.CapacityTypeOnDemand, pod("pc", "z", "500m"))
	d := c.decide(disruptionplan.Options{})
	cmd := d.Command
	if cmd == nil || cmd.Method != disruptionplan.MethodMultiNode {
		t.Fatalf("command = %+v, want multi-node", cmd)
	}
	if got := names(cmd); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("candidates = %v, want [a c] (a prefix search stops at [a b])", got)
	}
	if len(cmd.Replacements) != 0 {
		t.Errorf("replacements = %v, want none", cmd.Replacements)
	}
	// One node at a time saves less: the first round deletes a alone.
	single := 0.20
	if cmd.Savings() <= single {
		t.Errorf("savings %v, want more than single-node's %v", cmd.Savings(), single)
	}
}

func TestSmallSavingsAreRefusedAndExplained(t *testing.T) {
	build := func(policy karpv1.ConsolidationPolicy, full, tiny int) *cluster {
		c := newCluster(t)
		c.pool("default", func(np *karpv1.NodePool) {
			np.Spec.Disruption.ConsolidationPolicy = policy
			// On-demand only: spot would make every machine replaceable.
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
				Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
		})
		// A busy pool of full xl machines, and one m whose tiny pods would fit an s.
		for i := range full {
			n := fmt.Sprintf("x%d", i)
			c.node("default", n, "xl", karpv1.CapacityTypeOnDemand, pods(n, 16, "1")...)
		}
		c.node("default", "m", "m", karpv1.CapacityTypeOnDemand, pods("tiny", tiny, "50m")...)
		return c
	}
	// Three xl and 12 tiny pods: deleting the m outright would save $0.10/h of $1.30/h (7.7%) for
	// 13 of 64 disruption units (20.3%), score 0.38; replacing it by an s saves half of that,
	// score 0.19. Karpenter's WhenEmptyOrUnderutilized (the score turned off) replaces it.
	d := build(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, 3, 12).decide(disruptionplan.Options{UnderutilizedK: -1})
	if !slices.Equal(names(d.Command), []string{"m"}) || len(d.Command.Replacements) != 1 {
		t.Fatalf("WhenEmptyOrUnderutilized without the score: command = %v, want m replaced", names(d.Command))
	}
	// Capstan's prices the move against its evictions, with k = 3.
	d = build(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, 3, 12).decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("WhenEmptyOrUnderutilized: command = %v, want none", names(d.Command))
	}
	ev, msg := explanation(d, "m")
	if want := "WhenEmptyOrUnderutilized: saving $0.0500/h is too small for 12 eviction(s): saving 3.8% of the pool for 20.3% of its disruption (score 0.19 < 0.33) in NodePool default"; ev != disruptionplan.EventUnconsolidatable || msg != want {
		t.Errorf("explanation = %s %q, want %q", ev, msg, want)
	}
	// Four xl and 30 tiny pods: even deleting the m saves $0.10/h of $1.70/h (5.9%) for 31 of 99
	// units (31.3%): neither policy simulates it.
	for _, policy := range []karpv1.ConsolidationPolicy{karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, karpv1.ConsolidationPolicyBalanced} {
		d = build(policy, 4, 30).decide(disruptionplan.Options{})
		if d.Command != nil {
			t.Fatalf("%s: command = %v, want none", policy, names(d.Command))
		}
		ev, msg = explanation(d, "m")
		k := map[karpv1.ConsolidationPolicy]string{karpv1.ConsolidationPolicyBalanced: "0.50", karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized: "0.33"}[policy]
		if want := string(policy) + ": even deleting it outright would be saving 5.9% of the pool for 31.3% of its disruption (score 0.19 < " + k + "), too little for 30 eviction(s)"; ev != disruptionplan.EventUnconsolidatable || msg != want {
			t.Errorf("explanation = %s %q, want %q", ev, msg, want)
		}
	}
}

func TestBalancedTakesLargeSavings(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) { np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyBalanced })
	c.node("default", "x1", "xl", karpv1.CapacityTypeOnDemand, pods("full", 16, "1")...)
	// An xl with one small pod: replacing it by an s saves $0.35 of $0.80 (44%) for 2 of 19
	// disruption units (11%): score 4.2.
	c.node("default", "x2", "xl", karpv1.CapacityTypeOnDemand, pod("lonely", "l", "1"))
	d := c.decide(disruptionplan.Options{})
	if !slices.Equal(names(d.Command), []string{"x2"}) {
		t.Fatalf("command = %v, want x2 replaced", names(d.Command))
	}
	if s := d.Command.Scores["default"]; !s.Approved() || s.Value() < 4 {
		t.Errorf("score = %v, want about 4.2", s)
	}
	if r := d.Command.Rule(); !strings.HasPrefix(r, "saves $0.3800/h (95% of the candidates' price) for 1 eviction(s); Balanced in NodePool default: saving 47.5% ") ||
		!strings.Contains(r, ">= 0.50") {
		t.Errorf("rule %q, want the saving, the evictions and the Balanced score", r)
	}
	// The same move under WhenEmptyOrUnderutilized passes its bar of 1/3 and says so; with the
	// score turned off, the rule is the saving for the evictions.
	c.snap.NodePools[0].NodePool.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
	d = c.decide(disruptionplan.Options{})
	if r := d.Command.Rule(); !strings.HasPrefix(r, "saves $0.3800/h (95% of the candidates' price) for 1 eviction(s); WhenEmptyOrUnderutilized in NodePool default: saving 47.5% ") ||
		!strings.Contains(r, ">= 0.33") {
		t.Errorf("rule %q, want the saving, the evictions and the score against 1/3", r)
	}
	d = c.decide(disruptionplan.Options{UnderutilizedK: -1})
	if r := d.Command.Rule(); r != "WhenEmptyOrUnderutilized: saves $0.3800/h (95% of the candidates' price) for 1 eviction(s)" {
		t.Errorf("rule %q", r)
	}
}

func TestDriftReplacesEvenWhenNotCheaper(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	n := c.node("default", "old", "s", karpv1.CapacityTypeOnDemand, pod("a", "web", "1500m"))
	meta.RemoveStatusCondition(&n.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	n.NodeClaim.Status.Conditions = append(n.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	d := c.decide(disruptionplan.Options{})
	cmd := d.Command
	if cmd == nil || cmd.Method != disruptionplan.MethodDrift || cmd.Reason != karpv1.DisruptionReasonDrifted || len(cmd.Replacements) != 1 {
		t.Fatalf("command = %+v, want drift with one replacement", cmd)
	}
}

func TestDriftRespectsPDB(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	n := c.node("default", "old", "s", karpv1.CapacityTypeOnDemand, pod("a", "web", "1500m"))
	n.NodeClaim.Status.Conditions = append(n.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	c.pdb("web", 0)
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none", names(d.Command))
	}
	if ev, msg := explanation(d, "old"); ev != disruptionplan.EventDisruptionBlocked || msg != "pdb default/web allows no disruption" {
		t.Errorf("explanation = %s %q", ev, msg)
	}
}

func TestLimitsBoundReplacements(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.snap.NodePools[0].Solver.Remaining = corev1.ResourceList{corev1.ResourceCPU: *resourceQ("1")}
	c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "1500m"))
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %+v, want none: a 2-CPU replacement exceeds the 1 CPU left", d.Command)
	}
	if _, msg := explanation(d, "big"); !strings.Contains(msg, "would not fit elsewhere") {
		t.Errorf("explanation = %q", msg)
	}
}

func TestTwoQuarterUsedMachinesBecomeOne(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "m1", "m", karpv1.CapacityTypeOnDemand, pod("a", "web", "1"))
	c.node("default", "m2", "m", karpv1.CapacityTypeOnDemand, pod("b", "web", "1"))
	d := c.decide(disruptionplan.Options{})
	if !slices.Equal(names(d.Command), []string{"m1", "m2"}) || d.Command.Method != disruptionplan.MethodMultiNode || len(d.Command.Replacements) != 1 {
		t.Fatalf("command = %+v, want m1 and m2 replaced by one machine", d.Command)
	}
}

// A pod a consolidation moved 20 minutes ago pins its node unless a move is worth it many times
// over (ChurnK): replacing the node it is alone on saves the whole pool's price for the whole
// pool's disruption, score 1, under the bar of 10. An hour after the move the pool's own bar
// applies again. With the pool's score off (k off) the guard blocks outright.
func TestChurnGuard(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	moved := pod("web-new", "web", "1")
	moved.CreationTimestamp = metav1.NewTime(t0.Add(-20 * time.Minute))
	c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, moved)
	c.snap.Evictions = []disruptionplan.Eviction{{Namespace: "default", Name: "web-old", Owner: "rs-web", At: t0.Add(-20*time.Minute - 5*time.Second)}}
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none: its pod was moved by a consolidation 20 minutes ago", names(d.Command))
	}
	if _, msg := explanation(d, "big"); !strings.Contains(msg, "(score 1.00 < 10.00, the bar for moving a pod again: pod default/web-new was moved by a consolidation at 09:39:55 UTC)") {
		t.Errorf("explanation = %q", msg)
	}
	if d := c.decide(disruptionplan.Options{UnderutilizedK: -1}); d.Command != nil {
		t.Errorf("with k off: command = %v, want none", names(d.Command))
	} else if _, msg := explanation(d, "big"); !strings.Contains(msg, "was moved by a consolidation at 09:39:55 UTC; not again until 10:39:55 UTC") {
		t.Errorf("with k off: explanation = %q", msg)
	}
	// An hour later it may move again.
	c.snap.Now = t0.Add(41 * time.Minute)
	if d := c.decide(disruptionplan.Options{}); d.Command == nil {
		t.Error("no command after the churn guard's hour")
	}
}

// The churn guard gives way to a move worth it many times over. A large machine a burst bought
// keeps one pod that a consolidation moved onto it as the burst left (the kube-scheduler places
// moved pods on the least allocated node); deleting it saves half the pool's price for 3% of its
// disruption (score 16.5 >= 10), so it goes, where a hard guard kept it, and the pods moved onto
// it next, for an hour. A small machine in the same place saves 11% for 3% (score 3.67): enough
// for the pool's bar, not for moving a pod twice.
func TestChurnGuardGivesWayToLargeSavings(t *testing.T) {
	for _, tc := range []struct {
		shape string
		want  bool
	}{{"xl", true}, {"s", false}} {
		t.Run(tc.shape, func(t *testing.T) {
			c := newCluster(t)
			c.pool("default", func(np *karpv1.NodePool) {
				np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
					Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
			})
			moved := pod("web-new", "web", "250m")
			moved.CreationTimestamp = metav1.NewTime(t0.Add(-20 * time.Minute))
			c.node("default", "big", tc.shape, karpv1.CapacityTypeOnDemand, moved)
			for i := range 4 {
				c.node("default", fmt.Sprintf("m%d", i), "m", karpv1.CapacityTypeOnDemand, pods(fmt.Sprintf("api%d", i), 15, "250m")...)
			}
			c.snap.Evictions = []disruptionplan.Eviction{{Namespace: "default", Name: "web-old", Owner: "rs-web", At: t0.Add(-20*time.Minute - 5*time.Second)}}
			d := c.decide(disruptionplan.Options{})
			if !tc.want {
				if slices.Contains(names(d.Command), "big") {
					t.Fatalf("command = %v, want big kept", names(d.Command))
				}
				// 3.67 passes the pool's bar (0.33), not the churn guard's.
				if _, msg := explanation(d, "big"); !strings.Contains(msg, "(score 3.67 < 10.00, the bar for moving a pod again: pod default/web-new") {
					t.Errorf("explanation = %q", msg)
				}
				return
			}
			if !slices.Equal(names(d.Command), []string{"big"}) || len(d.Command.Replacements) != 0 {
				t.Fatalf("command = %+v, want big deleted", d.Command)
			}
			s := d.Command.Scores["default"]
			if s.K != disruptionplan.ChurnK || !strings.Contains(s.Calm, "web-new") || !s.Approved() || math.Abs(s.Value()-16.5) > 0.01 {
				t.Errorf("score = %+v, want approved at the churn bar", s)
			}
		})
	}
}

func TestReplacementIsNotConsolidatedWithinConsolidateAfter(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) { np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(30 * time.Minute) })
	n := c.node("default", "new", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "1"))
	n.NodeClaim.Annotations = map[string]string{disruptionplan.ReplacementAnnotationKey: string(disruptionplan.MethodSingleNode)}
	n.NodeClaim.CreationTimestamp = metav1.NewTime(t0.Add(-10 * time.Minute))
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none", names(d.Command))
	}
	if _, msg := explanation(d, "new"); !strings.Contains(msg, "launched by a disruption at 09:50:00 UTC") {
		t.Errorf("explanation = %q", msg)
	}
}

// A replacement is bought for pods that come only after its candidates are drained and their
// controllers create them again; with consolidateAfter 0s, emptiness took it in the seconds
// between (a controller manager slow after an API server restart), and the provisioner bought
// another machine when the pod came. It is held ReplacementSettle after its machine was
// initialised, then emptiness may take it; a node no disruption launched is not held.
func TestAnEmptyReplacementWaitsForThePodsItWasBoughtFor(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	n := c.node("default", "new", "l", karpv1.CapacityTypeOnDemand)
	n.NodeClaim.Annotations = map[string]string{disruptionplan.ReplacementAnnotationKey: string(disruptionplan.MethodDrift)}
	n.NodeClaim.CreationTimestamp = metav1.NewTime(t0.Add(-3 * time.Minute))
	meta.FindStatusCondition(n.NodeClaim.Status.Conditions, karpv1.ConditionTypeInitialized).LastTransitionTime = metav1.NewTime(t0.Add(-30 * time.Second))
	c.node("default", "plain", "l", karpv1.CapacityTypeOnDemand)
	d := c.decide(disruptionplan.Options{})
	if got := names(d.Command); !slices.Equal(got, []string{"plain"}) {
		t.Fatalf("command = %v, want emptiness of plain only: new is a replacement initialised 30 s ago", got)
	}
	if _, msg := explanation(d, "new"); !strings.Contains(msg, "its pods may still be on their way") || !strings.Contains(msg, "not before 10:01:30 UTC") {
		t.Errorf("explanation = %q", msg)
	}
	c.snap.Now = t0.Add(90 * time.Second)
	if got := names(c.decide(disruptionplan.Options{}).Command); !slices.Contains(got, "new") {
		t.Errorf("command = %v, want the replacement taken once %s passed since it was initialised", got, disruptionplan.DefaultReplacementSettle)
	}
	c.snap.Now = t0
	if got := names(c.decide(disruptionplan.Options{ReplacementSettle: -1}).Command); !slices.Contains(got, "new") {
		t.Errorf("command = %v with the hold off, want the replacement taken", got)
	}
}

// A replacement whose command's candidate is still there (its drain held by a PDB past the
// settle time) waits for it, however long: the candidate's pods are still to come.
func TestAReplacementWaitsWhileItsCandidateDrains(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	n := c.node("default", "new", "l", karpv1.CapacityTypeOnDemand)
	n.NodeClaim.Annotations = map[string]string{disruptionplan.ReplacementAnnotationKey: string(disruptionplan.MethodDrift)}
	old := c.node("default", "old", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "1"))
	old.NodeClaim.Annotations = map[string]string{disruptionplan.CommandAnnotationKey: `{"id":"c1","method":"Drift","reason":"Drifted","replacements":["new"]}`}
	deleting := metav1.NewTime(t0.Add(-10 * time.Minute))
	old.NodeClaim.DeletionTimestamp = &deleting
	d := c.decide(disruptionplan.Options{})
	if slices.Contains(names(d.Command), "new") {
		t.Fatalf("command = %v, want the replacement kept while its candidate drains", names(d.Command))
	}
	if _, msg := explanation(d, "new"); !strings.Contains(msg, "to take the pods of old, which is still there") {
		t.Errorf("explanation = %q", msg)
	}
	c.snap.Nodes = c.snap.Nodes[:1]
	if got := names(c.decide(disruptionplan.Options{}).Command); !slices.Contains(got, "new") {
		t.Errorf("command = %v once the candidate is gone (and the settle time long past), want the empty replacement taken", got)
	}
}

func TestWhenEmptyLeavesBusyNodes(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmpty
	})
	c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "1"))
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command = %v, want none under WhenEmpty", names(d.Command))
	}
	if _, msg := explanation(d, "big"); !strings.Contains(msg, "WhenEmpty") {
		t.Errorf("explanation = %q", msg)
	}
}

func TestDecisionIsDeterministic(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	for i := range 12 {
		c.node("default", "n"+string(rune('a'+i)), "l", karpv1.CapacityTypeOnDemand, pods("app"+string(rune('a'+i)), 1+i%3, "1")...)
	}
	first := names(c.decide(disruptionplan.Options{}).Command)
	for range 3 {
		if got := names(c.decide(disruptionplan.Options{}).Command); !slices.Equal(got, first) {
			t.Fatalf("decision changed: %v then %v", first, got)
		}
	}
}

func TestConsolidationLaunchesOneMachineWhereSeveralWouldBeCheaper(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
			Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	})
	// Three 1.5-CPU pods on an xl ($0.40/h): three s machines ($0.15/h) would hold them, but a
	// consolidation launches one machine — an l ($0.20/h).
	c.node("default", "xl", "xl", karpv1.CapacityTypeOnDemand, pods("web", 3, "1500m")...)
	d := c.decide(disruptionplan.Options{})
	cmd := d.Command
	if cmd == nil || len(cmd.Replacements) != 1 {
		t.Fatalf("command = %+v, want one replacement", cmd)
	}
	if got := cmd.Replacements[0].InstanceTypes[0].Name; got != "l" || len(cmd.Replacements[0].Pods) != 3 {
		t.Errorf("replacement %s with %d pods, want an l with all 3", got, len(cmd.Replacements[0].Pods))
	}
}

func TestConsolidationWaitsWhileTheClusterSettles(t *testing.T) {
	setup := func() *cluster {
		c := newCluster(t)
		c.pool("default", nil)
		c.node("default", "busy", "l", karpv1.CapacityTypeOnDemand, pods("web", 7, "1")...)
		c.node("default", "empty", "m", karpv1.CapacityTypeOnDemand)
		return c
	}
	// A machine still starting.
	c := setup()
	n := c.node("default", "starting", "s", karpv1.CapacityTypeOnDemand)
	starting(n, disruptionplan.StartingFor-time.Second)
	if d := c.decide(disruptionplan.Options{}); d.Command != nil || d.Settling != "1 machine(s) are starting" {
		t.Fatalf("command %v, settling %q; want none while a machine starts", names(d.Command), d.Settling)
	}
	// One that has not initialized for longer is stuck (a startup taint never removed), not
	// starting: it holds nothing back for ever.
	starting(n, disruptionplan.StartingFor)
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{"empty"}) {
		t.Fatalf("command %v, settling %q; want the empty node deleted beside a stuck machine", names(d.Command), d.Settling)
	}
	// A pending pod that will be placed.
	c = setup()
	p := pod("pending", "batch", "1")
	p.Spec.NodeName = ""
	c.snap.Pending = []*corev1.Pod{p}
	if d := c.decide(disruptionplan.Options{}); d.Command != nil || d.Settling != "1 pending pod(s) are about to be placed" {
		t.Fatalf("command %v, settling %q; want none while a pod is about to be placed", names(d.Command), d.Settling)
	}
	// A pending pod that fits nowhere does not hold consolidation back.
	huge := pod("huge", "batch", "100")
	huge.Spec.NodeName = ""
	c.snap.Pending = []*corev1.Pod{huge}
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{"empty"}) {
		t.Fatalf("command %v, settling %q; want the empty node deleted", names(d.Command), d.Settling)
	}
}

func TestValidateAbandonsConsolidationWhenPodsArrive(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "busy", "l", karpv1.CapacityTypeOnDemand, pods("web", 7, "1")...)
	c.node("default", "empty", "m", karpv1.CapacityTypeOnDemand)
	d := c.decide(disruptionplan.Options{})
	if d.Command == nil {
		t.Fatal("no command")
	}
	if cmd, why := disruptionplan.Validate(c.snap, disruptionplan.Options{}, d.Command); cmd == nil {
		t.Fatalf("the command does not hold on the same cluster: %s", why)
	}
	p := pod("burst", "batch", "2")
	p.Spec.NodeName = ""
	c.snap.Pending = []*corev1.Pod{p}
	if cmd, why := disruptionplan.Validate(c.snap, disruptionplan.Options{}, d.Command); cmd != nil || !strings.Contains(why, "settling") {
		t.Fatalf("command %v (%s); want it abandoned while a pod is about to be placed", cmd, why)
	}
}

// A drifted node whose pods would need a machine from a pool whose launches do not register
// waits (sigs#3072), and does not hold up the drift of another pool's node (sigs#3080).
func TestDriftWaitsForAPoolWhoseLaunchesDoNotRegister(t *testing.T) {
	c := newCluster(t)
	for _, name := range []string{"broken", "ok"} {
		c.pool(name, func(np *karpv1.NodePool) { np.Spec.Template.ObjectMeta.Labels = map[string]string{"pool": name} })
	}
	c.snap.NodePools[0].Solver.RegistrationUnhealthy = true
	drift := func(n *disruptionplan.Node, since time.Duration) {
		n.NodeClaim.Status.Conditions = append(n.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted,
			Status: metav1.ConditionTrue, Reason: "NodePoolDrifted", LastTransitionTime: metav1.NewTime(t0.Add(-since))})
	}
	selecting := func(name, pool string) *corev1.Pod {
		p := pod(name, pool, "1500m")
		p.Spec.NodeSelector = map[string]string{"pool": pool}
		return p
	}
	// The broken pool's node drifted first: drift would take it first.
	drift(c.node("broken", "old-broken", "s", karpv1.CapacityTypeOnDemand, selecting("a", "broken")), 2*time.Hour)
	drift(c.node("ok", "old-ok", "s", karpv1.CapacityTypeOnDemand, selecting("b", "ok")), time.Hour)
	d := c.decide(disruptionplan.Options{})
	if d.Command == nil || d.Command.Method != disruptionplan.MethodDrift || !slices.Equal(names(d.Command), []string{"old-ok"}) {
		t.Fatalf("command = %v, want old-ok's drift", names(d.Command))
	}
	if _, msg := explanation(d, "old-broken"); !strings.Contains(msg, "NodePool broken") || !strings.Contains(msg, karpv1.ConditionTypeNodeRegistrationHealthy+"=False") {
		t.Errorf("old-broken's explanation = %q, want the unhealthy pool named", msg)
	}
	// Healed, the broken pool's node goes first again.
	c.snap.NodePools[0].Solver.RegistrationUnhealthy = false
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{"old-broken"}) {
		t.Fatalf("healed: command = %v, want old-broken", names(d.Command))
	}
}

// An empty node that is the room a CapacityBuffer keeps is not removed; without the buffer, it
// is.
func TestEmptyNodeKeptAsCapacityBufferRoom(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "spare", "m", karpv1.CapacityTypeOnDemand)
	chunk := pod("room-buffer-0", "room", "1")
	chunk.Annotations = map[string]string{capacitybuffer.VirtualAnnotationKey: "default/room"}
	c.snap.Buffer = []*corev1.Pod{chunk}
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command %v, want none: spare is the buffer's room", names(d.Command))
	}
	if _, msg := explanation(d, "spare"); !strings.Contains(msg, "room CapacityBuffer default/room keeps") {
		t.Errorf("explanation %q", msg)
	}
	c.snap.Buffer = nil
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{"spare"}) {
		t.Fatalf("without the buffer: %v, want spare removed", names(d.Command))
	}
}

// An empty machine bought for a ProvisioningRequest is kept for its pods until its booking ends,
// and consolidation says why; then it is removed as any empty node.
func TestEmptyNodeKeptForAProvisioningRequest(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	n := c.node("default", "booked", "m", karpv1.CapacityTypeOnDemand)
	n.NodeClaim.Annotations = map[string]string{provreq.RequestAnnotationKey: "batch/gang",
		provreq.BookedUntilAnnotationKey: c.snap.Now.Add(time.Minute).UTC().Format(time.RFC3339)}
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command %v, want none: booked is kept for the request's pods", names(d.Command))
	}
	if ev, msg := explanation(d, "booked"); ev != disruptionplan.EventUnconsolidatable || !strings.Contains(msg, "ProvisioningRequest batch/gang") {
		t.Errorf("explanation %q %q", ev, msg)
	}
	c.snap.Now = c.snap.Now.Add(time.Minute)
	if d := c.decide(disruptionplan.Options{}); !slices.Equal(names(d.Command), []string{"booked"}) {
		t.Fatalf("once the booking ended: %v, want booked removed", names(d.Command))
	}
}

// A consolidation that would fill the room a CapacityBuffer keeps is not taken: two machines
// that one could hold stay while the buffer needs the other's room.
func TestConsolidationKeepsCapacityBufferRoom(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	})
	c.node("default", "a", "m", karpv1.CapacityTypeOnDemand, pod("big", "web", "3"))
	c.node("default", "b", "m", karpv1.CapacityTypeOnDemand, pod("small", "web", "1"))
	chunk := pod("room-buffer-0", "room", "3")
	chunk.Annotations = map[string]string{capacitybuffer.VirtualAnnotationKey: "default/room"}
	c.snap.Buffer = []*corev1.Pod{chunk}
	if d := c.decide(disruptionplan.Options{}); d.Command != nil {
		t.Fatalf("command %v (%s) %.2f -> %.2f, %d replacements, want none: the buffer's 3 CPU are the room left", names(d.Command), d.Command.Method, d.Command.PriceBefore, d.Command.PriceAfter, len(d.Command.Replacements))
	}
	c.snap.Buffer = nil
	if d := c.decide(disruptionplan.Options{}); d.Command == nil {
		t.Fatal("without the buffer the two nodes should become one")
	}
}

// Consolidation moves an on-demand node's pods onto a capacity reservation's machine (already
// paid for) while the reservation has one left, pinning the replacement to it; with none left it
// does not, and it never replaces a reserved machine to save money.
func TestConsolidationMovesOntoAReservation(t *testing.T) {
	for _, slots := range []int{1, 0} {
		c := newCluster(t)
		for i, it := range c.its {
			if it.Name == "m" {
				c.its[i] = cloudprovider.WithOfferings(it, cloudprovider.Offering{Zone: "z1", CapacityType: karpv1.CapacityTypeReserved,
					Price: cloudprovider.ReservedPrice(0.10), Available: slots > 0, ReservationID: "cr-1", ReservationCapacity: slots})
			}
		}
		c.pool("default", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
				Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved}}}
		})
		c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "1"), pod("b", "web", "1"))
		d := c.decide(disruptionplan.Options{})
		cmd := d.Command
		if slots == 0 {
			if cmd != nil {
				for _, r := range cmd.Replacements {
					if _, ok := r.Requirements.Get(cloudprovider.ReservationIDLabelKey); ok {
						t.Fatalf("a replacement is pinned to a reservation with no machine left: %v", r.Requirements)
					}
				}
			}
			continue
		}
		if cmd == nil || len(cmd.Replacements) != 1 {
			t.Fatalf("with a reserved machine left: command %+v, want one replacement", cmd)
		}
		r := cmd.Replacements[0]
		if id, ok := r.Requirements.Get(cloudprovider.ReservationIDLabelKey); !ok || !id.Allows("cr-1") || cmd.PriceAfter > 0.001 {
			t.Fatalf("replacement %v at %v $/h, want pinned to cr-1 at almost nothing", r.Requirements, cmd.PriceAfter)
		}
	}

	// A reserved machine is not replaced by anything cheaper: it costs nothing more to keep.
	c := newCluster(t)
	c.pool("default", nil)
	c.node("default", "held", "l", karpv1.CapacityTypeReserved, pod("a", "web", "500m"))
	for i, it := range c.its {
		if it.Name == "l" {
			c.its[i] = cloudprovider.WithOfferings(it, cloudprovider.Offering{Zone: "z1", CapacityType: karpv1.CapacityTypeReserved,
				Price: cloudprovider.ReservedPrice(0.20), Available: false, ReservationID: "cr-2"})
		}
	}
	c.snap.NodePools[0].Solver.InstanceTypes = c.its
	if d := c.decide(disruptionplan.Options{}); d.Command != nil {
		t.Fatalf("a reserved machine was replaced: %v", names(d.Command))
	}
}

// A drifted node in a capacity reservation whose pods have room only on the reservation's
// machine it holds (a reserved-only pool, the reservation full) is deleted first with
// TerminateFirstDrift, and left alone, explained, without it; a node not in a reservation is
// never deleted first.
func TestTerminateFirstDriftFreesTheReservationsMachine(t *testing.T) {
	setup := func(ct string) *cluster {
		c := newCluster(t)
		for i, it := range c.its {
			if it.Name == "m" {
				// The reservation's one machine is held by the drifted node: none left.
				c.its[i] = cloudprovider.WithOfferings(it, cloudprovider.Offering{Zone: "z1", CapacityType: karpv1.CapacityTypeReserved,
					Price: cloudprovider.ReservedPrice(0.10), Available: false, ReservationID: "cr-9", ReservationCapacity: 0})
			}
		}
		c.pool("default", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
				Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeReserved}}}
		})
		n := c.node("default", "held", "m", ct, pod("a", "web", "3"))
		n.NodeClaim.Labels[cloudprovider.ReservationIDLabelKey] = "cr-9"
		meta.RemoveStatusCondition(&n.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
		n.NodeClaim.Status.Conditions = append(n.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "AMIDrift"})
		return c
	}
	c := setup(karpv1.CapacityTypeReserved)
	d := c.decide(disruptionplan.Options{})
	if ev, msg := explanation(d, "held"); d.Command != nil || ev != disruptionplan.EventDisruptionBlocked || !strings.Contains(msg, "drifted, but") {
		t.Fatalf("gate off: command %v, explanation %s %q", names(d.Command), ev, msg)
	}
	d = c.decide(disruptionplan.Options{TerminateFirstDrift: true})
	cmd := d.Command
	if cmd == nil || cmd.Method != disruptionplan.MethodDrift || len(cmd.Replacements) != 0 || len(cmd.Candidates) != 1 || cmd.TerminateFirst == "" ||
		!strings.Contains(cmd.Rule(), "terminating first") {
		t.Fatalf("gate on: command %+v, want the node deleted first, without a replacement", cmd)
	}
	if again, why := disruptionplan.Validate(c.snap, disruptionplan.Options{TerminateFirstDrift: true}, cmd); again == nil || again.TerminateFirst == "" || len(again.Replacements) != 0 {
		t.Fatalf("the command does not validate again: %v (%s)", again, why)
	}
	// On-demand nodes hold no reservation: nothing to free, so nothing is deleted first.
	c = setup(karpv1.CapacityTypeOnDemand)
	if d := c.decide(disruptionplan.Options{TerminateFirstDrift: true}); d.Command != nil {
		t.Fatalf("an on-demand node was deleted first: %v", names(d.Command))
	}
}

// TestFallingLoadBar: under WhenEmptyOrUnderutilized a move evicting pods of an owner seen
// shrinking within CalmAfterScaleDown must score 1/CalmK (4) instead of 1/3; pods of other owners,
// an older scale-down, or the rule turned off leave the bar at 1/3. Balanced's 1/2 becomes 4 the
// same way.
func TestFallingLoadBar(t *testing.T) {
	build := func(sds ...disruptionplan.ScaleDown) *cluster {
		c := newCluster(t)
		c.pool("default", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{{Key: karpv1.CapacityTypeLabelKey,
				Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
		})
		for i := range 3 {
			n := fmt.Sprintf("x%d", i)
			c.node("default", n, "xl", karpv1.CapacityTypeOnDemand, pods(n, 15, "1")...)
		}
		// Deleting m moves its 12 tiny pods into an xl's room: $0.10/h of $1.30/h (7.7%) for 13
		// of 61 disruption units (21.3%), score 0.36.
		c.node("default", "m", "m", karpv1.CapacityTypeOnDemand, pods("tiny", 12, "50m")...)
		c.snap.ScaleDowns = sds
		return c
	}
	shrank := func(uid string, ago time.Duration) disruptionplan.ScaleDown {
		return disruptionplan.ScaleDown{Owner: "ReplicaSet default/" + uid, UID: types.UID(uid), At: t0.Add(-ago), Since: t0.Add(-ago)}
	}
	for _, tc := range []struct {
		name string
		sds  []disruptionplan.ScaleDown
		opts disruptionplan.Options
		take bool
	}{
		{"no scale-down", nil, disruptionplan.Options{}, true},
		{"its pods' owner shrank 2 minutes ago", []disruptionplan.ScaleDown{shrank("rs-tiny", 2*time.Minute)}, disruptionplan.Options{}, false},
		{"another owner shrank", []disruptionplan.ScaleDown{shrank("rs-x0", 2*time.Minute)}, disruptionplan.Options{}, true},
		{"its pods' owner shrank 11 minutes ago", []disruptionplan.ScaleDown{shrank("rs-tiny", 11*time.Minute)}, disruptionplan.Options{}, true},
		{"the rule turned off", []disruptionplan.ScaleDown{shrank("rs-tiny", 2*time.Minute)}, disruptionplan.Options{CalmAfterScaleDown: -1}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := build(tc.sds...).decide(tc.opts)
			if tc.take {
				if !slices.Equal(names(d.Command), []string{"m"}) || len(d.Command.Replacements) != 0 {
					t.Fatalf("command = %v, want m deleted", names(d.Command))
				}
				if s := d.Command.Scores["default"]; s.Calm != "" || s.K != disruptionplan.DefaultUnderutilizedK {
					t.Errorf("score %v, want the bar of 1/3", s)
				}
				return
			}
			if d.Command != nil {
				t.Fatalf("command = %v, want none", names(d.Command))
			}
			ev, msg := explanation(d, "m")
			if want := "WhenEmptyOrUnderutilized: even deleting it outright would be saving 7.7% of the pool for 21.3% of its disruption (score 0.36 < 4.00, the bar while an owner of its pods is scaling down), too little for 12 eviction(s)"; ev != disruptionplan.EventUnconsolidatable || msg != want {
				t.Errorf("explanation = %s %q, want %q", ev, msg, want)
			}
		})
	}
	// Balanced: with 4 tiny pods, deleting m scores 0.82 (7.7% of the cost for 9.4% of the
	// disruption), which Karpenter's 1/2 passes; while the tiny pods' owner shrinks the bar is 4
	// there too (stricter than Karpenter's rule, never looser), and another owner's scale-down
	// leaves Karpenter's bar.
	balanced := func(sds ...disruptionplan.ScaleDown) *disruptionplan.Decision {
		c := build(sds...)
		c.snap.NodePools[0].NodePool.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyBalanced
		c.snap.Nodes[3].Pods = c.snap.Nodes[3].Pods[:4]
		return c.decide(disruptionplan.Options{})
	}
	if d := balanced(shrank("rs-tiny", 2*time.Minute)); d.Command != nil {
		t.Errorf("Balanced while the owner shrinks: command = %v, want none", names(d.Command))
	} else if _, msg := explanation(d, "m"); !strings.Contains(msg, "(score 0.82 < 4.00, the bar while an owner of its pods is scaling down)") {
		t.Errorf("Balanced while the owner shrinks: explanation %q", msg)
	}
	d := balanced(shrank("rs-x0", 2*time.Minute))
	if !slices.Equal(names(d.Command), []string{"m"}) {
		t.Fatalf("Balanced, another owner shrank: command = %v, want m deleted", names(d.Command))
	}
	if s := d.Command.Scores["default"]; s.Calm != "" || s.K != disruptionplan.BalancedK {
		t.Errorf("Balanced: score %v, want the bar of 1/2", s)
	}
}

// A replacement keeps the pool's minValues: the types cheaper than the candidate must meet it
// (Strict: no replacement, and the node says why), or, under BestEffort, the claim's minValues is
// lowered to what they have and it says so — never a claim whose requirement asks for more values
// than it lists, which the API server refuses (the command then rolled back, round after round).
func TestReplacementsKeepMinValues(t *testing.T) {
	for _, tc := range []struct {
		minValues  int
		bestEffort bool
		want       int // types the replacement lists; 0: no replacement
	}{{2, false, 2}, {3, false, 0}, {3, true, 2}} {
		c := newCluster(t)
		c.pool("default", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
				{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}},
				{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpExists, MinValues: &tc.minValues}}
		})
		// An l (0.20 $/h) with one small pod: s and m are cheaper.
		c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "500m"))
		opts := disruptionplan.Options{}
		opts.Solver.MinValuesBestEffort = tc.bestEffort
		d := c.decide(opts)
		if tc.want == 0 {
			if d.Command != nil {
				t.Fatalf("minValues %d: command %v, want none", tc.minValues, names(d.Command))
			}
			if _, msg := explanation(d, "big"); !strings.Contains(msg, "minValues asks for 3") {
				t.Errorf("minValues %d: explanation %q", tc.minValues, msg)
			}
			continue
		}
		if d.Command == nil || len(d.Command.Replacements) != 1 {
			t.Fatalf("minValues %d, best effort %v: command %+v, want one replacement", tc.minValues, tc.bestEffort, d.Command)
		}
		r := d.Command.Replacements[0]
		its, _ := r.Requirements.Get(karpv1.InstanceTypeLabelKey)
		if len(r.InstanceTypes) != tc.want || its.MinValues > len(r.InstanceTypes) || r.MinValuesRelaxed != tc.bestEffort {
			t.Errorf("minValues %d, best effort %v: %d types, requirement minValues %d, relaxed %v", tc.minValues, tc.bestEffort,
				len(r.InstanceTypes), its.MinValues, r.MinValuesRelaxed)
		}
	}
}

// Karpenter v1.15: consolidation moves no pod onto a node still inside its NodePool's
// consolidateAfter (a pod arrived or left there, or it initialized, less than that ago). Here a
// candidate's pod fits on a node that just took a pod: it is not moved there (the candidate is
// replaced by a cheaper machine instead, or kept); a minute later it is.
func TestConsolidationMovesNoPodOntoANodeInsideConsolidateAfter(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) { np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(30 * time.Second) })
	c.node("default", "old", "m", karpv1.CapacityTypeOnDemand, pod("a-0", "a", "1"))
	// fresh, a large node that just took a pod, has room for old's; it is not consolidatable itself
	// (its condition follows the same window).
	fresh := c.node("default", "fresh", "l", karpv1.CapacityTypeOnDemand, pod("b-0", "b", "1"))
	fresh.NodeClaim.Status.LastPodEventTime = metav1.NewTime(t0.Add(-5 * time.Second))
	meta.RemoveStatusCondition(&fresh.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	on := func(d *disruptionplan.Decision, node string) bool {
		if d.Command == nil {
			return false
		}
		for _, b := range d.Command.Bindings {
			if b.Node == node {
				return true
			}
		}
		return false
	}
	d := c.decide(disruptionplan.Options{})
	if on(d, "fresh") {
		t.Fatalf("command %v moves a pod onto fresh, 5 s into its 30 s consolidateAfter", names(d.Command))
	}
	fresh.NodeClaim.Status.LastPodEventTime = metav1.NewTime(t0.Add(-time.Minute))
	d = c.decide(disruptionplan.Options{})
	if !on(d, "fresh") {
		t.Fatalf("command %+v, want old's pod moved onto fresh past its consolidateAfter", d.Command)
	}
}

// A node being deleted (its pod moving) was replaced a moment ago by a node still inside the
// pool's consolidateAfter, empty yet; another node drifted. The drift's pod may not move onto
// the fresh node (consolidation never fills a node inside its window), but the moving pod may:
// one machine is bought, for the drift, not a second one for the moving pod. (The solver skipped
// the fresh node for every later pod of the same shape once the drift's pod was refused there.)
func TestDriftBuysNothingForAMovingPodAFreshNodeTakes(t *testing.T) {
	c := newCluster(t)
	c.pool("default", func(np *karpv1.NodePool) { np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(5 * time.Second) })
	drifted := func(n *disruptionplan.Node) {
		n.NodeClaim.Status.Conditions = append(n.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	}
	// One pod per node: required anti-affinity by hostname.
	spread := func(name string) *corev1.Pod {
		p := pod(name, "web", "500m")
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}}}
		return p
	}
	leaving := c.node("default", "leaving", "m", karpv1.CapacityTypeOnDemand, spread("p-leaving"))
	deleted := metav1.NewTime(t0.Add(-time.Second))
	leaving.NodeClaim.DeletionTimestamp = &deleted
	drifted(leaving)
	fresh := c.node("default", "fresh", "m", karpv1.CapacityTypeOnDemand)
	meta.RemoveStatusCondition(&fresh.NodeClaim.Status.Conditions, karpv1.ConditionTypeConsolidatable)
	for i := range fresh.NodeClaim.Status.Conditions {
		fresh.NodeClaim.Status.Conditions[i].LastTransitionTime = metav1.NewTime(t0.Add(-time.Second))
	}
	for _, name := range []string{"a", "b"} {
		drifted(c.node("default", name, "m", karpv1.CapacityTypeOnDemand, spread("p-"+name)))
	}
	d := c.decide(disruptionplan.Options{})
	if d.Command == nil || d.Command.Method != disruptionplan.MethodDrift {
		t.Fatalf("command %+v, want a drift", d.Command)
	}
	var planned []string
	for _, r := range d.Command.Replacements {
		for _, p := range r.Pods {
			planned = append(planned, p.Name)
		}
	}
	if len(d.Command.Replacements) != 1 || len(planned) != 1 || planned[0] != "p-"+names(d.Command)[0] {
		t.Errorf("replacements %d for pods %v; want one, for the drifted node's pod (the moving p-leaving goes to the fresh node)", len(d.Command.Replacements), planned)
	}
}

// A drift replacement that registered and never initialized was kept when its command was rolled
// back (Karpenter's e2e "registers but never initialized"). The drifted node's pod would fit on
// it: the drift is not taken — neither onto a machine that may never come up, nor with yet
// another machine bought for it each round — and the node says why. Once the machine has
// initialized, the drift moves the pod there without buying anything.
func TestDriftNeverCountsOnANodeThatHasNotInitialized(t *testing.T) {
	c := newCluster(t)
	c.pool("default", nil)
	old := c.node("default", "old", "m", karpv1.CapacityTypeOnDemand, pod("p-old", "web", "1"))
	old.NodeClaim.Status.Conditions = append(old.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	kept := c.node("default", "kept", "m", karpv1.CapacityTypeOnDemand, pod("p-kept", "batch", "1"))
	starting(kept, 11*time.Minute)
	d := c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command %v with %d replacement(s); want none while the pod's room is a node that has not initialized", names(d.Command), len(d.Command.Replacements))
	}
	if _, msg := explanation(d, "old"); !strings.Contains(msg, "would go to node kept, which has not initialized") {
		t.Errorf("old's explanation %q; want it to name the node that has not initialized", msg)
	}
	// Nor on one that never registered (Karpenter's "never registers" spec): it is deleted
	// when its registration times out, and the drift goes on then.
	node := kept.Node
	kept.Node, kept.NodeClaim.Status.NodeName = nil, ""
	meta.RemoveStatusCondition(&kept.NodeClaim.Status.Conditions, karpv1.ConditionTypeRegistered)
	kept.NodeClaim.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m"}},
		{Key: karpv1.ZoneLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"z1"}},
		{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	kept.NodeClaim.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: *resourceQ("1")}
	kept.Pods = nil
	d = c.decide(disruptionplan.Options{})
	if d.Command != nil {
		t.Fatalf("command %v with %d replacement(s); want none while the pod's room is a machine that never registered", names(d.Command), len(d.Command.Replacements))
	}
	if _, msg := explanation(d, "old"); !strings.Contains(msg, "which has not initialized") {
		t.Errorf("old's explanation %q; want it to name the machine that has not initialized", msg)
	}
	kept.Node, kept.NodeClaim.Status.NodeName, kept.Pods = node, node.Name, []*corev1.Pod{pod("p-kept", "batch", "1")}
	kept.NodeClaim.Status.Conditions = append(kept.NodeClaim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionTrue, Reason: "Initialized"})
	d = c.decide(disruptionplan.Options{})
	if !slices.Equal(names(d.Command), []string{"old"}) || len(d.Command.Replacements) != 0 {
		t.Fatalf("command %v; want old drifted onto the initialized node, nothing bought", names(d.Command))
	}
}

// A replacement must fit what is left of the cluster's spending limit beside the machine it
// replaces, which still counts until it is gone: with $0.04/h left the cheaper `s` (up to $0.05/h
// on demand) cannot be bought, with $0.05/h it can.
func TestReplacementFitsTheClusterSpendingLimit(t *testing.T) {
	for _, tc := range []struct {
		left    float64
		replace bool
	}{{0.04, false}, {0.05, true}} {
		c := newCluster(t)
		c.pool("default", nil)
		c.node("default", "big", "l", karpv1.CapacityTypeOnDemand, pod("a", "web", "500m"), pod("b", "web", "500m"))
		c.snap.SpendingLeft = &tc.left
		d := c.decide(disruptionplan.Options{})
		if got := d.Command != nil && len(d.Command.Replacements) == 1; got != tc.replace {
			t.Errorf("$%.2f/h left: replaced %v, want %v (command %+v)", tc.left, got, tc.replace, d.Command)
		}
	}
}
