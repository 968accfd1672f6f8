package solver_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
	"capstan.dev/capstan/internal/spend"
)

// spotDiscountTypes are n fake types whose spot offerings cost 35% of their on-demand ones, so
// that what a claim may cost depends on the offering it launches on.
func spotDiscountTypes(n int) []*cloudprovider.InstanceType {
	its := workload.FakeInstanceTypes(n)
	for _, it := range its {
		for i := range it.Offerings {
			if it.Offerings[i].CapacityType == karpv1.CapacityTypeSpot {
				it.Offerings[i].Price *= 0.35
			}
		}
	}
	return its
}

// worstOf is the most a planned claim may cost: the dearest offering its requirements allow of
// any of its candidates.
func worstOf(nc *solver.PlannedNodeClaim) float64 {
	worst := 0.0
	for _, it := range nc.InstanceTypes {
		if w, ok := spend.WorstCase(it, nc.Requirements); ok {
			worst = max(worst, w)
		}
	}
	return worst
}

// A spending limit is hard and does not throttle: over random pools, limits and pods, provisioning
// passes one after the other (each planning the pods the last left pending against what the
// claims planned so far may cost, as the provisioner does) (1) plan machines that cost at most the
// limit whatever candidate and offering the cloud launches for each claim; (2) leave a pod pending
// for the limit only when what is left is less than the cheapest worst case of a type that could
// hold it; (3) refuse nothing under a limit twice what the unlimited plan may cost; and the
// refusal names the spending limit.
func TestSpendingLimitHoldsWhicheverOfferingLaunches(t *testing.T) {
	for seed := range uint64(120) {
		r := rand.New(rand.NewPCG(seed, 7))
		its := spotDiscountTypes(10 + r.IntN(50))
		cpus := []string{"100m", "250m", "500m", "1", "2", "3500m"}
		var ps []*corev1.Pod
		for d := range 1 + r.IntN(5) {
			ps = append(ps, pods(1+r.IntN(40), fmt.Sprintf("d%d", d), cpus[r.IntN(len(cpus))], "256Mi", nil)...)
		}
		free := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{poolOf(its)}}, solver.Options{})
		unlimited := 0.0
		for _, nc := range free.NodeClaims {
			unlimited += worstOf(nc)
		}
		limit := 2 * unlimited
		if seed%2 == 1 {
			limit = 0.5 + r.Float64()*unlimited
		}
		planned := 0.0
		var refused []solver.PodError
		for pass := 0; len(ps) > 0 && pass < 5; pass++ {
			pool := poolOf(its)
			pool.Remaining = corev1.ResourceList{spend.LimitKey: *resource.NewMilliQuantity(spend.Milli(limit)-spend.Milli(planned), resource.DecimalSI)}
			res := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{pool}}, solver.Options{})
			for _, nc := range res.NodeClaims {
				planned += worstOf(nc)
			}
			refused, ps = res.Unschedulable, nil
			for _, u := range res.Unschedulable {
				ps = append(ps, u.Pod)
			}
			if len(res.NodeClaims) == 0 {
				break
			}
		}
		if planned > limit+1e-9 {
			t.Fatalf("seed %d: the plans may cost $%.4f/h, the limit is $%.4f/h", seed, planned, limit)
		}
		for _, u := range refused {
			if !strings.Contains(u.Reason, "limits exhausted") {
				continue
			}
			if !strings.Contains(u.Reason, "spending limit ("+string(spend.LimitKey)+")") {
				t.Fatalf("seed %d: refused for the limit without naming it: %s", seed, u.Reason)
			}
			if limit >= 2*unlimited {
				t.Fatalf("seed %d: pod %s refused for a limit of $%.4f/h; without it the plan may cost $%.4f/h", seed, u.Pod.Name, limit, unlimited)
			}
			need := u.Pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			cheapest := -1.0
			for _, it := range its {
				if alloc := it.Allocatable(); alloc.Cpu().MilliValue() >= need {
					if w, _ := spend.WorstCase(it, requirements.Requirements{}); cheapest < 0 || w < cheapest {
						cheapest = w
					}
				}
			}
			// Each claim's price is rounded up to a tenth of a cent in the limit's arithmetic.
			if left := limit - planned; cheapest >= 0 && left >= cheapest+0.001*float64(len(free.NodeClaims)+10) {
				t.Fatalf("seed %d: pod %s left pending for the limit with $%.4f/h left, enough for a type of $%.4f/h", seed, u.Pod.Name, left, cheapest)
			}
		}
	}
}

// A pool with a spending limit and a pod that fits only where the limit is spent says so, with
// the dollars left.
func TestSpendingLimitNamedWhenExhausted(t *testing.T) {
	its := spotDiscountTypes(8)
	pool := poolOf(its)
	pool.Remaining = corev1.ResourceList{spend.LimitKey: resource.MustParse("0.25")}
	res := solve(t, solver.Input{Pods: pods(1, "big", "7", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
	if len(res.Unschedulable) != 1 {
		t.Fatalf("want the 7-CPU pod refused under a $0.25/h limit (an 8-CPU type costs $2.40/h on demand); planned %d claims", len(res.NodeClaims))
	}
	want := "limits exhausted: spending limit (capstan.dev/dollars-per-hour) $0.250/h left"
	if got := res.Unschedulable[0].Reason; !strings.Contains(got, want) {
		t.Fatalf("reason %q, want it to contain %q", got, want)
	}
}

// The cluster's spending limit binds every pool together: over random pools and limits, what the
// claims of two pools may cost adds up to at most what is left of it, a generous one refuses
// nothing, and a pod refused for it is told the cluster's limit holds it.
func TestClusterSpendingLimitSpansPools(t *testing.T) {
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 11))
		its := spotDiscountTypes(10 + r.IntN(30))
		a, b := poolOf(its), poolOf(its)
		a.Name, b.Name = "a", "b"
		a.Weight = 10
		if seed%3 == 0 {
			// One pool with a limit of its own too.
			a.Remaining = corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(8+r.IntN(64)), resource.DecimalSI)}
		}
		ps := pods(20+r.IntN(200), "web", []string{"250m", "500m", "1", "2"}[r.IntN(4)], "256Mi", nil)
		free := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{a, b}}, solver.Options{})
		unlimited := 0.0
		for _, nc := range free.NodeClaims {
			unlimited += worstOf(nc)
		}
		left := 2 * unlimited
		if seed%2 == 1 {
			left = 0.3 + r.Float64()*unlimited*0.8
		}
		res := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{a, b}, SpendingLeft: &left}, solver.Options{})
		planned := 0.0
		for _, nc := range res.NodeClaims {
			planned += worstOf(nc)
		}
		if planned > left+1e-9 {
			t.Fatalf("seed %d: the claims of both pools may cost $%.4f/h, the cluster has $%.4f/h left", seed, planned, left)
		}
		for _, u := range res.Unschedulable {
			if seed%2 == 0 && len(free.Unschedulable) == 0 {
				t.Fatalf("seed %d: pod %s refused under a cluster limit twice what the plan may cost: %s", seed, u.Pod.Name, u.Reason)
			}
			if strings.Contains(u.Reason, "limits exhausted") && !strings.Contains(u.Reason, "the cluster's spending limit (--spending-limit)") {
				t.Fatalf("seed %d: refused for a limit without naming the cluster's: %s", seed, u.Reason)
			}
		}
	}
}

// With a CPU limit beside the spending limit, each figure says it is what is left: "cpu 990m"
// alone read as the CPU that ran out.
func TestEveryExhaustedLimitSaysWhatIsLeft(t *testing.T) {
	its := spotDiscountTypes(8)
	pool := poolOf(its)
	pool.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("990m"), spend.LimitKey: resource.MustParse("0.015")}
	res := solve(t, solver.Input{Pods: pods(1, "big", "2", "1Gi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{})
	if len(res.Unschedulable) != 1 {
		t.Fatalf("want the 2-CPU pod refused; planned %d claims", len(res.NodeClaims))
	}
	want := "limits exhausted: cpu 990m left, spending limit (capstan.dev/dollars-per-hour) $0.015/h left, too little for any instance type"
	if got := res.Unschedulable[0].Reason; !strings.Contains(got, want) {
		t.Fatalf("reason %q, want it to contain %q", got, want)
	}
}
