// Package sweep draws scale-down shapes from a seed and plays each in the replay, beside two
// references: the LP bound of the pods left, packed freely, and the cheapest set of the machines
// held at the scale-in that runs the pods left without moving any. It is the instrument that shows
// whether the settled price after a scale-down is the cheapest for any shape, not only for the
// cells measured on the local cluster.
package sweep

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/replay"
	"capstan.dev/capstan/internal/solver/workload"
)

// Capacity types a shape's pool allows.
const (
	SpotAndOnDemand = "spot+on-demand"
	SpotOnly        = "spot"
	OnDemandOnly    = "on-demand"
)

// Deployment is one Deployment of a shape: each pod's requests and the count at the peak.
type Deployment struct {
	CPU, Memory string
	Pods        int
	// Final is the count after the last scale-in step.
	Final int
}

// Shape is one drawn scale-down.
type Shape struct {
	// Index is the shape's place in the draw.
	Index       int
	Deployments []Deployment
	// Steps is the number of scale-in steps (1–3), each taking an equal share of the way to Final;
	// the first comes FirstAfter the moment the last pod of the burst runs, the others Every apart.
	Steps      int
	FirstAfter time.Duration
	Every      time.Duration
	// Capacity is SpotAndOnDemand, SpotOnly or OnDemandOnly.
	Capacity string
	Policy   karpv1.ConsolidationPolicy
	// Menu names the catalog (a key of the menus Play is given).
	Menu string
}

// String is the shape in one line.
func (s Shape) String() string {
	out := fmt.Sprintf("#%d %s %s %s", s.Index, s.Menu, s.Capacity, s.Policy)
	for _, d := range s.Deployments {
		out += fmt.Sprintf(" [%s/%s %d→%d]", d.CPU, d.Memory, d.Pods, d.Final)
	}
	return out + fmt.Sprintf(" steps=%d first=%s every=%s", s.Steps, s.FirstAfter, s.Every)
}

// maxDeploymentPods bounds each Deployment's pods by the number of Deployments, so that a shape
// replays in seconds and CheapestKeep's table stays small.
var maxDeploymentPods = []int{1: 1000, 2: 600, 3: 200}

// Draw draws n shapes from the seed over the menus named: one to three Deployments of pods from
// 100m/128Mi to 4 CPU/16Gi with 1 to 8 GiB per CPU, each scaled in to 5–90% of its pods in one
// to three steps, the first 0–5 minutes after the last pod runs; a pool that is spot and
// on-demand, spot only or on-demand only; either policy; either menu. The same seed and menus
// draw the same shapes.
func Draw(seed uint64, n int, menus []string) []Shape {
	rng := rand.New(rand.NewPCG(seed, 0x5ca1ed0))
	out := make([]Shape, n)
	for i := range out {
		s := Shape{Index: i, Steps: 1 + rng.IntN(3), Menu: menus[rng.IntN(len(menus))]}
		s.FirstAfter = time.Duration(rng.IntN(31)) * 10 * time.Second
		s.Every = time.Duration(6+rng.IntN(25)) * 10 * time.Second
		s.Capacity = []string{SpotAndOnDemand, SpotOnly, OnDemandOnly}[rng.IntN(3)]
		s.Policy = []karpv1.ConsolidationPolicy{karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, karpv1.ConsolidationPolicyBalanced}[rng.IntN(2)]
		deps := 1 + rng.IntN(3)
		for range deps {
			// CPU log-uniform in [100m, 4], in steps of 50m; memory 1–8 GiB per CPU, in [128Mi, 16Gi].
			milli := int(math.Round(100*math.Pow(40, rng.Float64())/50) * 50)
			mib := min(max(int(float64(milli)*(1+7*rng.Float64())*1024/1000), 128), 16<<10)
			// The Deployment's CPU at the peak log-uniform in [20, 300] vCPU.
			total := 20 * math.Pow(15, rng.Float64())
			pods := min(max(int(total*1000/float64(milli)), 10), maxDeploymentPods[deps])
			final := max(1, int(math.Round(float64(pods)*(0.05+0.85*rng.Float64()))))
			s.Deployments = append(s.Deployments, Deployment{CPU: fmt.Sprintf("%dm", milli), Memory: fmt.Sprintf("%dMi", mib), Pods: pods, Final: final})
		}
		out[i] = s
	}
	return out
}

// Result is what one shape's replay measured.
type Result struct {
	Shape Shape
	// Peak is the price when the first scale-in came; Settled the price at the end.
	Peak, Settled float64
	// Left is the pods left after the last step.
	Left int
	// Evictions and Twice count the pods disruption evicted after the first scale-in, and those
	// of them evicted a second time.
	Evictions, Twice int
	// Bound is the LP bound of the pods left on the menu the pool allows (workload.LPBound);
	// Keep is the cheapest set of the machines held at the first scale-in that runs the pods left
	// without a move (CheapestKeep), +Inf when it was too large to compute.
	Bound, Keep float64
	// ConfigBound is the configuration LP bound of the pods left (workload.ConfigLPBound: machines
	// counted fractionally, pods whole), which every whole-machine plan costs at least.
	ConfigBound float64
	// Fresh is the price of the pods left bought from nothing: the same pool provisioning them on
	// an empty cluster (no scale-down, nothing to move), settled — what the pods left cost when
	// no history shapes the machines.
	Fresh float64
	// RanAfter is how long after its start the burst's last pod ran.
	RanAfter time.Duration
	// End are the machines the cluster settled with.
	End []replay.Machine
}

// Options are what Play varies.
type Options struct {
	// Disruption are the decision core's options (Capstan's defaults when zero).
	Disruption disruptionplan.Options
	// Log, when set, receives a line per command the replay carries out.
	Log func(string)
}

// configIterations bounds ConfigLPBound's column generation.
const configIterations = 60

// Settle is how long a shape plays after its last scale-in step: past the falling load's bar
// (10 minutes), HoldEmptyFor and a few rounds of a 10% budget.
const Settle = 30 * time.Minute

// burstFor bounds the wait for the burst's last pod to run.
const burstFor = 15 * time.Minute

// Play replays the shape on its menu with Capstan's defaults and pod deletion costs, as the
// PodDeletionCostManagement gate writes them: the burst created at the controller manager's pace
// (20 pods a second), the scale-in steps, then Settle.
func Play(s Shape, menus map[string][]*cloudprovider.InstanceType, opts Options) (Result, error) {
	its, ok := menus[s.Menu]
	if !ok {
		return Result{}, fmt.Errorf("shape %d: no menu %q", s.Index, s.Menu)
	}
	np := pool(s)
	c, err := replay.New(replay.Config{NodePool: np, InstanceTypes: its, PodDeletionCost: true, Disruption: opts.Disruption, Log: opts.Log})
	if err != nil {
		return Result{}, fmt.Errorf("shape %d: %w", s.Index, err)
	}
	const step = 10 * time.Second
	var scaleAt time.Duration = -1
	total := 0
	deps := make([]replay.Deployment, len(s.Deployments))
	for i, d := range s.Deployments {
		total += d.Pods
		rise := time.Duration(d.Pods) * time.Second / 20
		deps[i] = replay.Deployment{Name: fmt.Sprintf("d%d", i), CPU: d.CPU, Memory: d.Memory, Replicas: func(at time.Duration) int {
			if at < rise {
				return min(d.Pods, int(float64(d.Pods)*float64(at+step)/float64(rise)))
			}
			if scaleAt < 0 || at < scaleAt {
				return d.Pods
			}
			k := min(s.Steps, 1+int((at-scaleAt)/s.Every))
			return d.Pods - (d.Pods-d.Final)*k/s.Steps
		}}
	}
	at := time.Duration(0)
	for ; at < burstFor; at += step {
		c.Run(deps, step)
		if c.Pending() == 0 && len(c.Pods()) == total {
			break
		}
	}
	res := Result{Shape: s, RanAfter: at + step}
	scaleAt = at + step + s.FirstAfter
	c.Run(deps, s.FirstAfter)
	res.Peak = c.Price()
	held := holdings(c, len(deps))
	before := c.Report()
	c.Run(deps, time.Duration(s.Steps-1)*s.Every+Settle)
	after := c.Report()
	res.Settled, res.End = c.Price(), c.Machines()
	res.Evictions, res.Twice = after.Evictions-before.Evictions, after.Reevictions-before.Reevictions
	want := make([]int, len(s.Deployments))
	for i, d := range s.Deployments {
		want[i] = d.Final
		res.Left += d.Final
	}
	if keep, ok := CheapestKeep(held, want); ok {
		res.Keep = keep
	} else {
		res.Keep = math.Inf(1)
	}
	menu := allowed(its, np)
	left := c.Pods()
	res.Bound = workload.LPBound(menu, left)
	res.ConfigBound = workload.ConfigLPBound(menu, left, configIterations)
	if res.Fresh, err = fresh(s, its); err != nil {
		return Result{}, err
	}
	return res, nil
}

// fresh replays the pods left of the shape on an empty cluster of its pool and returns the
// settled price.
func fresh(s Shape, its []*cloudprovider.InstanceType) (float64, error) {
	c, err := replay.New(replay.Config{NodePool: pool(s), InstanceTypes: its, PodDeletionCost: true})
	if err != nil {
		return 0, fmt.Errorf("shape %d: %w", s.Index, err)
	}
	deps := make([]replay.Deployment, len(s.Deployments))
	for i, d := range s.Deployments {
		deps[i] = replay.Deployment{Name: fmt.Sprintf("d%d", i), CPU: d.CPU, Memory: d.Memory, Replicas: func(time.Duration) int { return d.Final }}
	}
	c.Run(deps, 10*time.Minute)
	return c.Price(), nil
}

// DefaultCatalog is the simulated cloud's default catalog (a SimNodeClass with no settings), the
// sweep's "capstan" menu.
func DefaultCatalog(ctx context.Context) ([]*cloudprovider.InstanceType, error) {
	clk := clock.RealClock{}
	p, err := sim.NewProvider(nil, sim.NewCloudWithStore(clk, nil), clk, nil)
	if err != nil {
		return nil, err
	}
	return p.InstanceTypes(ctx, &simv1alpha1.SimNodeClass{})
}

// holdings are the cluster's machines with their pods per Deployment ("d<i>").
func holdings(c *replay.Cluster, deps int) []Holding {
	price := map[string]float64{}
	for _, m := range c.Machines() {
		price[m.Name] = m.Price
	}
	var out []Holding
	for _, n := range c.Snapshot().Nodes {
		h := Holding{Price: price[n.Name()], Pods: make([]int, deps)}
		for _, p := range n.Pods {
			var i int
			if _, err := fmt.Sscanf(p.Labels["app"], "d%d", &i); err == nil && i < deps {
				h.Pods[i]++
			}
		}
		out = append(out, h)
	}
	return out
}

// pool is the shape's NodePool: amd64 Linux, its capacity types, its policy, consolidateAfter 30s
// and the default 10% budget.
func pool(s Shape) *karpv1.NodePool {
	cts := map[string][]string{SpotAndOnDemand: {karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand},
		SpotOnly: {karpv1.CapacityTypeSpot}, OnDemandOnly: {karpv1.CapacityTypeOnDemand}}[s.Capacity]
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{
		{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: cts},
		{Key: karpv1.ArchLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.ArchitectureAmd64}},
		{Key: karpv1.OSLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.OSLinux}},
	}
	np.Spec.Disruption = karpv1.Disruption{ConsolidateAfter: karpv1.NewDuration(30 * time.Second), ConsolidationPolicy: s.Policy,
		Budgets: []karpv1.Budget{{Nodes: "10%"}}}
	return np
}

// allowed are the menu's types the pool may launch, with only the offerings it may buy: what the
// LP bound may use.
func allowed(its []*cloudprovider.InstanceType, np *karpv1.NodePool) []*cloudprovider.InstanceType {
	reqs, err := nodepools.Requirements(np)
	if err != nil {
		return nil
	}
	ct, _ := reqs.Get(karpv1.CapacityTypeLabelKey)
	var out []*cloudprovider.InstanceType
	for _, it := range its {
		if it.Requirements.Intersects(reqs) != nil {
			continue
		}
		cp := *it
		cp.Offerings = slices.DeleteFunc(slices.Clone(it.Offerings), func(o cloudprovider.Offering) bool { return !ct.Allows(o.CapacityType) })
		out = append(out, &cp)
	}
	return out
}

// Summary is the sweep's figures over its shapes, and the marks they are held to.
type Summary struct {
	Shapes int
	// OverBoundMedian and OverBoundP95 are the settled price over the LP bound; OverConfigMedian
	// and OverConfigP95 over the configuration LP bound; OverFreshMedian and OverFreshP95 over a
	// fresh plan of the pods left.
	OverBoundMedian, OverBoundP95   float64
	OverConfigMedian, OverConfigP95 float64
	OverFreshMedian, OverFreshP95   float64
	// OverKeepMax is the largest settled price over the cheapest no-move set (shapes whose set
	// was computed), and OverKeepShapes the shapes more than 5% above theirs.
	OverKeepMax    float64
	OverKeepShapes []int
	// EvictedMedian and EvictedP95 are the evictions over the pods left.
	EvictedMedian, EvictedP95 float64
	// Twice sums the pods moved twice.
	Twice int
}

// Summarize computes the summary of the results.
func Summarize(rs []Result) Summary {
	s := Summary{Shapes: len(rs)}
	var overBound, overConfig, overFresh, evicted []float64
	for _, r := range rs {
		overBound = append(overBound, r.Settled/r.Bound)
		overConfig = append(overConfig, r.Settled/r.ConfigBound)
		overFresh = append(overFresh, r.Settled/r.Fresh)
		evicted = append(evicted, float64(r.Evictions)/float64(max(r.Left, 1)))
		if !math.IsInf(r.Keep, 1) {
			over := r.Settled / r.Keep
			s.OverKeepMax = max(s.OverKeepMax, over)
			if over > 1.05+1e-9 {
				s.OverKeepShapes = append(s.OverKeepShapes, r.Shape.Index)
			}
		}
		s.Twice += r.Twice
	}
	s.OverBoundMedian, s.OverBoundP95 = quantile(overBound, 0.5), quantile(overBound, 0.95)
	s.OverConfigMedian, s.OverConfigP95 = quantile(overConfig, 0.5), quantile(overConfig, 0.95)
	s.OverFreshMedian, s.OverFreshP95 = quantile(overFresh, 0.5), quantile(overFresh, 0.95)
	s.EvictedMedian, s.EvictedP95 = quantile(evicted, 0.5), quantile(evicted, 0.95)
	return s
}

// Failures are the marks the summary misses: median ≤ 1.05 and 95th percentile ≤ 1.20 times the
// LP bound, no shape more than 5% above its no-move set, evictions' median 0 and 95th percentile
// ≤ 10% of the pods left, no pod moved twice.
func (s Summary) Failures() []string {
	var out []string
	if s.OverBoundMedian > 1.05 {
		out = append(out, fmt.Sprintf("median settled price %.3f× the LP bound, want ≤ 1.05", s.OverBoundMedian))
	}
	if s.OverBoundP95 > 1.20 {
		out = append(out, fmt.Sprintf("95th percentile %.3f× the LP bound, want ≤ 1.20", s.OverBoundP95))
	}
	if len(s.OverKeepShapes) > 0 {
		out = append(out, fmt.Sprintf("%d shape(s) more than 5%% above their cheapest no-move set (%v; worst %.3f×)", len(s.OverKeepShapes), s.OverKeepShapes, s.OverKeepMax))
	}
	if s.EvictedMedian > 0 {
		out = append(out, fmt.Sprintf("median evictions %.1f%% of the pods left, want 0", 100*s.EvictedMedian))
	}
	if s.EvictedP95 > 0.10 {
		out = append(out, fmt.Sprintf("95th percentile evictions %.1f%% of the pods left, want ≤ 10%%", 100*s.EvictedP95))
	}
	if s.Twice > 0 {
		out = append(out, fmt.Sprintf("%d pod(s) moved twice, want none", s.Twice))
	}
	return out
}

// quantile is the q-quantile of the values (nearest rank), 0 for none.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	vs = slices.Clone(vs)
	slices.SortFunc(vs, cmp.Compare[float64])
	i := int(math.Ceil(q*float64(len(vs)))) - 1
	return vs[min(max(i, 0), len(vs)-1)]
}
