package solver_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// Limits are hard and do not throttle: over random pools, limits and pods, (1) whichever candidate
// the cloud launches for each claim, the launched CPU stays within the limit; (2) a pod is refused
// for the limit only when what the plan's claims reserve leaves less than the smallest type that
// could hold it; and (3) a limit twice what the unlimited plan launches refuses nothing — the
// reservations are what can really be launched, not the largest machine that fits.
func TestLimitsHoldWhicheverCandidateLaunchesAndRefuseOnlyWhenFull(t *testing.T) {
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 99))
		its := workload.FakeInstanceTypes(20 + r.IntN(60))
		cpus := []string{"100m", "250m", "500m", "1", "2", "3500m"}
		var ps []*corev1.Pod
		for d := range 1 + r.IntN(5) {
			ps = append(ps, pods(1+r.IntN(40), fmt.Sprintf("d%d", d), cpus[r.IntN(len(cpus))], "256Mi", nil)...)
		}
		free := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{poolOf(its)}}, solver.Options{})
		unlimited := int64(0)
		for _, nc := range free.NodeClaims {
			unlimited += nc.InstanceTypes[0].Capacity.Cpu().Value()
		}
		// Half the seeds get a generous limit, half a random one that may bind.
		limit := 2 * unlimited
		if seed%2 == 1 {
			limit = int64(4 + r.IntN(120))
		}
		pool := poolOf(its)
		pool.Remaining = corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(limit, resource.DecimalSI)}
		res := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{pool}}, solver.Options{})
		reserved := int64(0)
		for trial := range 20 {
			launched := int64(0)
			for _, nc := range res.NodeClaims {
				it := nc.InstanceTypes[r.IntN(len(nc.InstanceTypes))]
				launched += it.Capacity.Cpu().Value()
				if trial == 0 {
					largest := int64(0)
					for _, c := range nc.InstanceTypes {
						largest = max(largest, c.Capacity.Cpu().Value())
					}
					reserved += largest
				}
			}
			if launched > limit {
				t.Fatalf("seed %d: launching one candidate per claim uses %d CPU, limit %d", seed, launched, limit)
			}
		}
		for _, u := range res.Unschedulable {
			if !strings.Contains(u.Reason, "limits exhausted") {
				continue
			}
			need := u.Pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			smallest := int64(-1)
			for _, it := range its {
				if alloc := it.Allocatable(); alloc.Cpu().MilliValue() >= need {
					if c := it.Capacity.Cpu().Value(); smallest < 0 || c < smallest {
						smallest = c
					}
				}
			}
			if limit >= 2*unlimited {
				t.Fatalf("seed %d: pod %s refused for a limit of %d CPU; without the limit the plan launches %d", seed, u.Pod.Name, limit, unlimited)
			}
			if left := limit - reserved; smallest >= 0 && left >= smallest {
				t.Fatalf("seed %d: pod %s refused for the limit with %d CPU left unreserved, enough for a %d-CPU type", seed, u.Pod.Name, left, smallest)
			}
		}
	}
}

// Limits that cannot hold every pod take the pods that waited longest (the earliest in
// Input.Pods, as the provisioner orders them) first, whatever their size — as many of them as the
// limit would hold were they alone: largest-first packing alone would always pass over small pods
// for large ones that keep coming.
func TestLimitsServeThePodsThatWaitedLongest(t *testing.T) {
	its := workload.FakeInstanceTypes(40)
	small := pods(8, "small", "1", "256Mi", nil)
	large := pods(8, "large", "3500m", "256Mi", nil)
	limited := func() solver.NodePool {
		pool := poolOf(its)
		pool.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}
		return pool
	}
	placed := func(res *solver.Result, prefix string) (n int) {
		for _, nc := range res.NodeClaims {
			for _, p := range nc.Pods {
				if strings.HasPrefix(p.Name, prefix) {
					n++
				}
			}
		}
		return n
	}
	for _, tc := range []struct {
		name         string
		first, later []*corev1.Pod
		prefix       string
	}{
		{"small pods waited longer", small, large, "small"},
		{"large pods waited longer", large, small, "large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append(append([]*corev1.Pod{}, tc.first...), tc.later...)
			res := solve(t, solver.Input{Pods: in, NodePools: []solver.NodePool{limited()}}, solver.Options{})
			if len(res.Unschedulable) == 0 {
				t.Fatal("the limit holds every pod; the test needs one that cannot")
			}
			// As many of them as the limit holds with no other pod pending.
			alone := solve(t, solver.Input{Pods: tc.first, NodePools: []solver.NodePool{limited()}}, solver.Options{})
			if got, want := placed(res, tc.prefix), placed(alone, tc.prefix); got != want {
				t.Fatalf("%d of the %d pods that waited longest placed, %d when they are the only ones pending; %d refused in all",
					got, len(tc.first), want, len(res.Unschedulable))
			}
		})
	}
}
