package autoscaling

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/test/e2e"
)

// A GPU capacity shortage: pods that each need a machine of their own (one GPU), a preferred
// NodePool of g5 machines where 70% of the offerings answer insufficient capacity (every spot
// offering, and g5.xlarge and g5.2xlarge on demand) and the rest run dry after perOffering
// machines each, and a fallback NodePool of g4dn machines of lower weight with no shortage.
type shortage struct {
	name        string
	pods        int32
	perOffering int32
}

// stormFigures are what a shortage cost.
type stormFigures struct {
	// created and iceDeleted count the NodeClaims created, and deleted for insufficient
	// capacity, in both pools; the per-minute figures are the most in any minute.
	created, iceDeleted                int
	createdPerMinute, deletedPerMinute int
	// preferred and fallback count the machines each pool runs once every pod runs.
	preferred, fallback int
	// running is the time from creating the pods until all run; longestWait the longest any
	// pod waited from its creation until it was scheduled.
	running, longestWait time.Duration
}

const nvidiaGPU = corev1.ResourceName("nvidia.com/gpu")

// preferredTypes are the g5 types with one GPU: each holds one of the storm's pods.
var preferredTypes = []string{"g5.xlarge", "g5.2xlarge", "g5.4xlarge", "g5.8xlarge", "g5.16xlarge"}

// run creates the two pools and the pods, waits until every pod runs, and returns the figures.
func (sh shortage) run(tb testing.TB) stormFigures {
	tb.Helper()
	gpuPool := func(family string, weight int32) func(*karpv1.NodePool) {
		return func(np *karpv1.NodePool) {
			np.Spec.Weight = &weight
			np.Spec.Template.ObjectMeta.Labels[poolLabel] = sh.name
			np.Spec.Template.Spec.Requirements = karpv1.Requirements{
				{Key: awsv1.LabelInstanceFamily, Operator: karpv1.NodeSelectorOpIn, Values: []string{family}},
				{Key: awsv1.LabelInstanceGPUCount, Operator: karpv1.NodeSelectorOpIn, Values: []string{"1"}},
				{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand}},
			}
		}
	}
	preferred, fallback := sh.name+"-preferred", sh.name+"-fallback"
	pool(tb, preferred, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.InstanceTypes = preferredTypes
		snc.Spec.Failures.InsufficientCapacity = []simv1alpha1.OfferingSelector{{CapacityType: karpv1.CapacityTypeSpot},
			{InstanceType: "g5.xlarge", CapacityType: karpv1.CapacityTypeOnDemand}, {InstanceType: "g5.2xlarge", CapacityType: karpv1.CapacityTypeOnDemand}}
		snc.Spec.Failures.Shortages = []simv1alpha1.OfferingShortage{{OfferingSelector: simv1alpha1.OfferingSelector{CapacityType: karpv1.CapacityTypeOnDemand}, Machines: sh.perOffering}}
	}, gpuPool("g5", 100))
	pool(tb, fallback, nil, gpuPool("g4dn", 10))

	ctx, stop := context.WithCancel(tb.Context())
	defer stop()
	samples := sampleClaimCounters(ctx, preferred, fallback)
	start := time.Now()
	deployment(tb, sh.name, sh.name, sh.pods, "1", "4Gi", func(ps *corev1.PodSpec) {
		ps.Containers[0].Resources.Requests[nvidiaGPU] = resource.MustParse("1")
		ps.Containers[0].Resources.Limits = corev1.ResourceList{nvidiaGPU: resource.MustParse("1")}
	})
	eventually(tb, fmt.Sprintf("%d pods Running", sh.pods), 2*time.Minute+time.Duration(sh.pods)*time.Second, running(tb, sh.name, int(sh.pods)))
	f := stormFigures{running: time.Since(start)}
	stop()
	f.created, f.iceDeleted, f.createdPerMinute, f.deletedPerMinute = samples.figures()
	f.preferred, f.fallback = len(claims(tb, preferred)), len(claims(tb, fallback))
	for _, p := range pods(tb, sh.name) {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
				f.longestWait = max(f.longestWait, c.LastTransitionTime.Sub(p.CreationTimestamp.Time))
			}
		}
	}
	return f
}

// claimSamples are the NodeClaim counters of some pools, read every second.
type claimSamples struct {
	mu                 sync.Mutex
	created, iceDelete []float64
	done               chan struct{}
}

// sampleClaimCounters reads Capstan's NodeClaim counters for the pools every second until ctx
// ends.
func sampleClaimCounters(ctx context.Context, pools ...string) *claimSamples {
	cs := &claimSamples{done: make(chan struct{})}
	read := func() (created, deleted float64, ok bool) {
		mf, err := e2e.ScrapeMetrics(s.metricsAddr)
		if err != nil {
			return 0, 0, false
		}
		for _, p := range pools {
			created += e2e.SumMetric(mf, "karpenter_nodeclaims_created_total", map[string]string{"nodepool": p})
			deleted += e2e.SumMetric(mf, "karpenter_nodeclaims_disrupted_total", map[string]string{"nodepool": p, "reason": metrics.ReasonInsufficientCapacity})
		}
		return created, deleted, true
	}
	go func() {
		defer close(cs.done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			if c, d, ok := read(); ok {
				cs.mu.Lock()
				cs.created, cs.iceDelete = append(cs.created, c), append(cs.iceDelete, d)
				cs.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return cs
}

// figures waits for the sampling to end and returns the totals and the most in any 60 samples.
func (s *claimSamples) figures() (created, deleted, createdPerMinute, deletedPerMinute int) {
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	most := func(xs []float64) (total, perMinute int) {
		if len(xs) == 0 {
			return 0, 0
		}
		for i := range xs {
			perMinute = max(perMinute, int(xs[min(i+60, len(xs)-1)]-xs[i]))
		}
		return int(xs[len(xs)-1] - xs[0]), perMinute
	}
	created, createdPerMinute = most(s.created)
	deleted, deletedPerMinute = most(s.iceDelete)
	return created, deleted, createdPerMinute, deletedPerMinute
}

// A GPU shortage costs a bounded number of claims: 36 pods that each need a machine, 70% of the
// preferred pool's offerings answering insufficient capacity and the rest running dry after two
// machines each (18 machines). Every pod runs: 18 on the preferred pool, the others on the
// fallback pool; NodeClaims created stay within twice the pods.
func TestCapacityShortageFallsBackCalmly(t *testing.T) {
	sh := shortage{name: "e2e-short", pods: 36, perOffering: 2}
	f := sh.run(t)
	t.Logf("%+v", f)
	if want := 9 * int(sh.perOffering); f.preferred != want {
		t.Errorf("%d machines on the preferred pool, want %d (its nine offerings with capacity, %d each)", f.preferred, want, sh.perOffering)
	}
	if want := int(sh.pods) - 9*int(sh.perOffering); f.fallback != want {
		t.Errorf("%d machines on the fallback pool, want %d", f.fallback, want)
	}
	if f.created > 2*int(sh.pods) {
		t.Errorf("%d NodeClaims created (%d deleted for insufficient capacity) for %d pods; a shortage may cost at most twice the claims", f.created, f.iceDeleted, sh.pods)
	}
}

// BenchmarkCapacityShortage measures a 600-machine GPU burst in a shortage: 70% of the preferred
// pool's offerings answer insufficient capacity and the other nine run dry after 20 machines each,
// so 420 pods must go to the fallback pool. It reports NodeClaims created and deleted for
// insufficient capacity (in all, and the most in any minute), the time until every pod runs, the
// longest any pod waited to be scheduled, and the machines on each pool.
//
//	CAPSTAN_E2E_KCM_QPS=200 go test -run XXX -bench CapacityShortage -benchtime 1x -timeout 40m ./test/e2e/autoscaling/
func BenchmarkCapacityShortage(b *testing.B) {
	for i := 0; b.Loop(); i++ {
		f := shortage{name: fmt.Sprintf("e2e-bench-short-%d", i), pods: 600, perOffering: 20}.run(b)
		b.ReportMetric(float64(f.created), "nodeclaims-created")
		b.ReportMetric(float64(f.iceDeleted), "nodeclaims-ice-deleted")
		b.ReportMetric(float64(f.createdPerMinute), "most-created-per-min")
		b.ReportMetric(float64(f.deletedPerMinute), "most-ice-deleted-per-min")
		b.ReportMetric(f.running.Seconds(), "s-to-all-running")
		b.ReportMetric(f.longestWait.Seconds(), "s-longest-wait")
		b.ReportMetric(float64(f.preferred), "preferred-machines")
		b.ReportMetric(float64(f.fallback), "fallback-machines")
	}
}
