package solver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

func BenchmarkKarpenterDiverse(b *testing.B) {
	its := workload.FakeInstanceTypes(400)
	for _, n := range []int{1, 100, 1000, 5000, 20000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			pods := workload.DiversePods(n, 42)
			// The provisioner passes its provider's label keys; so does the benchmark.
			in := solver.Input{Pods: pods, NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)},
				WellKnownLabels: workload.WellKnownLabels(its)}
			var r *solver.Result
			b.ResetTimer()
			for b.Loop() {
				r = solver.Solve(in, solver.Options{})
			}
			b.StopTimer()
			report(b, n, r)
			b.ReportMetric(r.Price()/workload.LPBound(its, pods), "cost/LP")
		})
	}
}

// BenchmarkKarpenterDiverseNoHostname is the same workload without the pods that have
// hostname-level constraints (hostname spread and anti-affinity), where the plan's cost can be
// held against the LP bound.
func BenchmarkKarpenterDiverseNoHostname(b *testing.B) {
	its := workload.FakeInstanceTypes(400)
	for _, n := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			var pods []*corev1.Pod
			for _, p := range workload.DiversePods(n, 42) {
				if !workload.HasHostnameConstraint(p) {
					pods = append(pods, p)
				}
			}
			in := solver.Input{Pods: pods, NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)}}
			var r *solver.Result
			for b.Loop() {
				r = solver.Solve(in, solver.Options{})
			}
			report(b, len(pods), r)
			b.ReportMetric(r.Price()/workload.LPBound(its, pods), "cost/LP")
		})
	}
}

func BenchmarkPreferences(b *testing.B) {
	its := workload.FakeInstanceTypes(400)
	pods := workload.PreferencePods(4000, 42)
	in := solver.Input{Pods: pods, NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)}}
	for _, ignore := range []bool{false, true} {
		b.Run(fmt.Sprintf("ignore=%v", ignore), func(b *testing.B) {
			var r *solver.Result
			for b.Loop() {
				r = solver.Solve(in, solver.Options{IgnorePreferences: ignore})
			}
			report(b, len(pods), r)
		})
	}
}

func BenchmarkEC2Catalog(b *testing.B) {
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		b.Fatal(err)
	}
	for _, mix := range []workload.Mix{workload.MixWeb, workload.MixCache, workload.MixBatch, workload.MixGPU, workload.MixMixed} {
		b.Run(string(mix), func(b *testing.B) {
			pods := workload.MixPods(mix, 42)
			in := solver.Input{Pods: pods, NodePools: []solver.NodePool{workload.UnlimitedPool("default", its)}}
			var r *solver.Result
			for b.Loop() {
				r = solver.Solve(in, solver.Options{})
			}
			report(b, len(pods), r)
			b.ReportMetric(r.Price()/workload.LPBound(its, pods), "cost/LP")
		})
	}
}

// report fails the benchmark when a pod was left unplaced and reports speed, nodes and price.
func report(b *testing.B, pods int, r *solver.Result) {
	b.Helper()
	if len(r.Unschedulable) > 0 {
		b.Fatalf("%d pods unschedulable, first: %s", len(r.Unschedulable), r.Unschedulable[0].Reason)
	}
	b.ReportMetric(float64(pods)/(b.Elapsed().Seconds()/float64(b.N)), "pods/s")
	b.ReportMetric(float64(len(r.NodeClaims)), "nodes")
	b.ReportMetric(r.Price(), "$/h")
}

// BenchmarkSmallBatches solves 100 batches of 1–4 pods of mixed shapes on the EC2 catalog (the
// passes most production clusters run) and reports their total cost against the exhaustive
// optimum of each batch.
func BenchmarkSmallBatches(b *testing.B) {
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		b.Fatal(err)
	}
	batches := smallBatches(100, 11)
	var cost, best float64
	for _, batch := range batches {
		best += optimum(its, karpv1.CapacityTypeOnDemand, batch)
	}
	np := workload.UnlimitedPool("default", its)
	np.Requirements.Add(requirements.Single(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeOnDemand))
	for b.Loop() {
		cost = 0
		for _, batch := range batches {
			r := solver.Solve(solver.Input{Pods: batch, NodePools: []solver.NodePool{np}}, solver.Options{})
			if len(r.Unschedulable) > 0 {
				b.Fatalf("%d pods unplaced", len(r.Unschedulable))
			}
			cost += r.Price()
		}
	}
	b.ReportMetric(cost, "$/h")
	b.ReportMetric(cost/best, "cost/optimum")
}

// BenchmarkLimitedBurst is issue 8's burst — 1,000 pods of 250m/256Mi on the EC2 catalog, amd64,
// spot and on-demand — with and without a `cpu: 2000` limit: a limit far above the need must not
// change the plan much. It reports the CPU the claims reserve against the limit (the largest
// candidate of each) next to the CPU of the types the plan expects to launch.
func BenchmarkLimitedBurst(b *testing.B) {
	its, err := workload.EC2InstanceTypes()
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, 1000)
	for i := range pods {
		pods[i] = workload.Pod(fmt.Sprintf("inflate-%d", i), "250m", "256Mi", map[string]string{"app": "inflate"})
	}
	for _, limit := range []string{"", "2000"} {
		b.Run("limit="+limit, func(b *testing.B) {
			np := workload.UnlimitedPool("default", its)
			np.Requirements.Add(requirements.Single(karpv1.ArchLabelKey, karpv1.ArchitectureAmd64))
			if limit != "" {
				np.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(limit)}
			}
			in := solver.Input{Pods: pods, NodePools: []solver.NodePool{np}}
			var r *solver.Result
			for b.Loop() {
				r = solver.Solve(in, solver.Options{})
			}
			report(b, len(pods), r)
			reserved, launched := 0.0, 0.0
			for _, nc := range r.NodeClaims {
				largest := 0.0
				for _, it := range nc.InstanceTypes {
					largest = max(largest, it.Capacity.Cpu().AsApproximateFloat64())
				}
				reserved += largest
				launched += nc.InstanceTypes[0].Capacity.Cpu().AsApproximateFloat64()
			}
			b.ReportMetric(reserved, "cpu-reserved")
			b.ReportMetric(launched, "cpu-launched")
		})
	}
}

// BenchmarkNodeCost shows the plan shape a per-node cost buys for the 1,000-pod burst (250m,
// 256Mi, amd64, spot and on-demand) on the EC2 catalog and on the simulated cloud's default
// catalog: `nodes`, `instance-$/h` (what the cloud bills) and `total-$/h` (plus the node cost
// of every machine). 0.007 $/h is a 20 GiB gp3 root volume and a public IPv4 address; 0.03
// adds a per-host monitoring agent.
//
//	go test -run XXX -bench NodeCost -benchtime 3x ./internal/solver/
func BenchmarkNodeCost(b *testing.B) {
	ec2, err := workload.EC2InstanceTypes()
	if err != nil {
		b.Fatal(err)
	}
	simProvider, err := sim.NewProvider(nil, nil, clocktesting.NewFakeClock(time.Time{}), nil)
	if err != nil {
		b.Fatal(err)
	}
	simDefault, err := simProvider.InstanceTypes(context.Background(), &simv1alpha1.SimNodeClass{})
	if err != nil {
		b.Fatal(err)
	}
	pods := make([]*corev1.Pod, 1000)
	for i := range pods {
		pods[i] = workload.Pod(fmt.Sprintf("inflate-%d", i), "250m", "256Mi", map[string]string{"app": "inflate"})
	}
	for _, catalog := range []struct {
		name string
		its  []*cloudprovider.InstanceType
	}{{"ec2", ec2}, {"sim-default", simDefault}} {
		for _, cost := range []float64{0, 0.007, 0.03} {
			b.Run(fmt.Sprintf("catalog=%s/node-cost=%v", catalog.name, cost), func(b *testing.B) {
				np := workload.UnlimitedPool("default", catalog.its)
				np.Requirements.Add(requirements.Single(karpv1.ArchLabelKey, karpv1.ArchitectureAmd64))
				np.NodeCost = cost
				in := solver.Input{Pods: pods, NodePools: []solver.NodePool{np}}
				var r *solver.Result
				for b.Loop() {
					r = solver.Solve(in, solver.Options{})
				}
				if len(r.Unschedulable) > 0 {
					b.Fatalf("%d pods unschedulable", len(r.Unschedulable))
				}
				n := float64(len(r.NodeClaims))
				b.ReportMetric(n, "nodes")
				b.ReportMetric(r.Price()-cost*n, "instance-$/h")
				b.ReportMetric(r.Price(), "total-$/h")
			})
		}
	}
}

// BenchmarkPodsPlacedUnderLimits counts the pods a binding CPU limit lets run, with and without
// FillLimits (provisioning's re-plan with the types that run the most pods within the limit), on
// the scheduling benchmark's shapes: Karpenter's diverse workload (1,000 pods, without the
// hostname-constrained ones) on its 400 fake types, and the 1,000-pod burst of 1.5-CPU pods on
// the EC2 catalog (amd64), each under a CPU limit of a quarter, a half and three quarters of its
// pods' CPU.
//
//	go test -run XXX -bench PodsPlacedUnderLimits -benchtime 1x ./internal/solver/
func BenchmarkPodsPlacedUnderLimits(b *testing.B) {
	fake := workload.FakeInstanceTypes(400)
	ec2, err := workload.EC2InstanceTypes()
	if err != nil {
		b.Fatal(err)
	}
	var diverse []*corev1.Pod
	for _, p := range workload.DiversePods(1000, 42) {
		if !workload.HasHostnameConstraint(p) {
			diverse = append(diverse, p)
		}
	}
	burst := make([]*corev1.Pod, 1000)
	for i := range burst {
		burst[i] = workload.Pod(fmt.Sprintf("burst-%d", i), "1500m", "256Mi", map[string]string{"app": "burst"})
	}
	for _, shape := range []struct {
		name string
		its  []*cloudprovider.InstanceType
		pods []*corev1.Pod
		amd  bool
	}{{"diverse", fake, diverse, false}, {"ec2-burst", ec2, burst, true}} {
		need := solver.Requests(shape.pods)
		demand := need.Cpu().AsApproximateFloat64()
		for _, share := range []float64{0.25, 0.5, 0.75} {
			for _, fill := range []bool{false, true} {
				b.Run(fmt.Sprintf("%s/limit=%.0f%%/fill=%v", shape.name, share*100, fill), func(b *testing.B) {
					np := workload.UnlimitedPool("default", shape.its)
					if shape.amd {
						np.Requirements.Add(requirements.Single(karpv1.ArchLabelKey, karpv1.ArchitectureAmd64))
					}
					np.Remaining = corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(demand*share*1000), resource.DecimalSI)}
					in := solver.Input{Pods: shape.pods, NodePools: []solver.NodePool{np}}
					var r *solver.Result
					for b.Loop() {
						r = solver.Solve(in, solver.Options{FillLimits: fill})
					}
					b.ReportMetric(float64(len(shape.pods)-len(r.Unschedulable)), "pods-placed")
					b.ReportMetric(r.Price(), "$/h")
				})
			}
		}
	}
}
