package solver_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// cheapestFor is the price of the cheapest available offering of a type that holds every pod of
// the group, or +Inf.
func cheapestFor(its []*cloudprovider.InstanceType, ct string, group []*corev1.Pod) float64 {
	var cpu, mem int64
	for _, p := range group {
		r := p.Spec.Containers[0].Resources.Requests
		cpu += r.Cpu().MilliValue()
		mem += r.Memory().Value()
	}
	best := math.Inf(1)
	for _, it := range its {
		a := it.Allocatable()
		if a.Cpu().MilliValue() < cpu || a.Memory().Value() < mem || a.Pods().Value() < int64(len(group)) {
			continue
		}
		for _, o := range it.Offerings {
			if o.Available && o.CapacityType == ct && o.Price < best {
				best = o.Price
			}
		}
	}
	return best
}

// optimum is the cheapest way to buy machines for a handful of pods: the best partition of the
// pods into groups, each on the cheapest type that holds it (exhaustive, for up to 5 pods).
func optimum(its []*cloudprovider.InstanceType, ct string, ps []*corev1.Pod) float64 {
	if len(ps) == 0 {
		return 0
	}
	// The first pod's group is any subset of the others plus it.
	first, rest := ps[0], ps[1:]
	best := math.Inf(1)
	for mask := 0; mask < 1<<len(rest); mask++ {
		group := []*corev1.Pod{first}
		var others []*corev1.Pod
		for i, p := range rest {
			if mask&(1<<i) != 0 {
				group = append(group, p)
			} else {
				others = append(others, p)
			}
		}
		if c := cheapestFor(its, ct, group); !math.IsInf(c, 1) {
			best = min(best, c+optimum(its, ct, others))
		}
	}
	return best
}

// smallBatches are n batches of 1–4 pods of random shapes, from a fixed seed.
func smallBatches(n int, seed uint64) [][]*corev1.Pod {
	r := rand.New(rand.NewPCG(seed, seed))
	cpus := []string{"100m", "250m", "500m", "700m", "1", "1500m", "2", "3", "3500m", "6"}
	mems := []string{"128Mi", "512Mi", "1Gi", "2Gi", "3Gi", "6Gi", "12Gi"}
	out := make([][]*corev1.Pod, n)
	for c := range out {
		for i := range 1 + r.IntN(4) {
			out[c] = append(out[c], workload.Pod(fmt.Sprintf("c%d-p%d", c, i), cpus[r.IntN(len(cpus))], mems[r.IntN(len(mems))], map[string]string{"app": fmt.Sprint(i)}))
		}
	}
	return out
}

// Pods that fit together on one mid-size machine are bought one machine, and in general a few
// pods of mixed shapes cost what the best exhaustive purchase costs, on the EC2 catalog, for
// on-demand and spot pools.
func TestFewPodsCostTheExhaustiveOptimum(t *testing.T) {
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		t.Fatal(err)
	}
	worse := 0
	const cases = 60
	for c, ps := range smallBatches(cases, 7) {
		ct := []string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeSpot}[c%2]
		np := workload.UnlimitedPool("default", its)
		np.Requirements.Add(requirements.Single(karpv1.CapacityTypeLabelKey, ct))
		res := solve(t, solver.Input{Pods: ps, NodePools: []solver.NodePool{np}}, solver.Options{})
		wantAllPlaced(t, res)
		best := optimum(its, ct, ps)
		if got := res.Price(); got > best*1.0001 {
			worse++
			desc := ""
			for _, p := range ps {
				rq := p.Spec.Containers[0].Resources.Requests
				desc += fmt.Sprintf(" %s/%s", rq.Cpu(), rq.Memory())
			}
			t.Logf("case %d (%s,%s): %d claims cost %.4f, the best purchase %.4f", c, ct, desc, len(res.NodeClaims), got, best)
		}
	}
	if worse > 0 {
		t.Fatalf("%d of %d small batches cost more than the exhaustive optimum", worse, cases)
	}
}
