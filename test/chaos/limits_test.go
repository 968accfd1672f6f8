package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

// TestBurstsAgainstLimits: a burst far past a NodePool's cpu, memory and nodes limits, Capstan
// killed in its midst and restarted. Every NodeClaim the pool had — each one a watch saw, not a
// sample — launched together stays within every limit (consolidation is off, so no machine
// leaves and the sum over all claims bounds every moment), and the pool fills up to its limits
// rather than stopping short of them.
func TestBurstsAgainstLimits(t *testing.T) {
	seed := setting("SEED", 1, 1)
	replicas := setting("LIMIT_PODS", 600, 10000)
	cpuLimit := setting("LIMIT_CPU", 48, 1000)
	nodesLimit := setting("LIMIT_NODES", 10, 200)
	memLimit := resource.MustParse(fmt.Sprintf("%dGi", 4*cpuLimit))
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	const name = "burst-limits"
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: 2 * time.Second}
		snc.Spec.InstanceTypes = []string{"m5.large", "m5.xlarge", "m5.2xlarge", "c5.xlarge", "c5.2xlarge", "r5.xlarge"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(cpuLimit), resource.DecimalSI),
			corev1.ResourceMemory: memLimit, karpv1.ResourceNodes: *resource.NewQuantity(int64(nodesLimit), resource.DecimalSI)}
		np.Spec.Disruption.ConsolidateAfter = karpv1.NeverDuration()
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	claimLog := h.WatchClaims(t, ctx, name)

	labels := map[string]string{"app": name}
	grace := int64(0)
	n := int32(replicas)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace, NodeSelector: map[string]string{poolLabel: name},
				Containers: []corev1.Container{{Name: "app", Image: "pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}}},
			}}}}
	if err := h.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	// The kill comes while the burst's claims are being created and launched.
	time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
	h.Stop(syscall.SIGKILL)
	if err := start(); err != nil {
		t.Fatal(err)
	}

	// Settled: every claim launched, and no new one for 30 s.
	last, stableSince := -1, time.Now()
	eventually(t, "the burst settled", 10*time.Minute, func(ctx context.Context) (bool, error) {
		claims := h.Claims(t, name)
		for _, c := range claims {
			if c.Status.ProviderID == "" {
				return false, nil
			}
		}
		if len(claims) != last {
			last, stableSince = len(claims), time.Now()
		}
		return time.Since(stableSince) > 30*time.Second, nil
	})
	var cpu, mem resource.Quantity
	records := claimLog.Seen()
	for name, r := range records {
		if !r.Launched {
			// A claim deleted before it launched holds nothing; say so if any.
			t.Logf("NodeClaim %s never launched", name)
			continue
		}
		cpu.Add(r.CPU)
		mem.Add(r.Memory)
	}
	if cpu.Cmp(*resource.NewQuantity(int64(cpuLimit), resource.DecimalSI)) > 0 || mem.Cmp(memLimit) > 0 || len(records) > nodesLimit {
		t.Errorf("launched %s CPU, %s memory on %d NodeClaims against limits %d, %s, %d", cpu.String(), mem.String(), len(records), cpuLimit, memLimit.String(), nodesLimit)
	}
	// Held, not avoided: the pool came within one machine of a limit (the largest type has 8 CPU).
	if cpu.Value() < int64(cpuLimit)-8 && len(records) < nodesLimit && mem.Cmp(resource.MustParse(fmt.Sprintf("%dGi", 4*cpuLimit-64))) < 0 {
		t.Errorf("launched only %s CPU, %s memory on %d NodeClaims against limits %d, %s, %d", cpu.String(), mem.String(), len(records), cpuLimit, memLimit.String(), nodesLimit)
	}
	running := 0
	for _, p := range h.Pods(t, name) {
		if p.Status.Phase == corev1.PodRunning {
			running++
		}
	}
	figures("bursts-against-limits seed=%d pods=%d limits=cpu:%d,memory:%s,nodes:%d kills=1 claims-ever=%d launched-cpu=%d launched-memory=%dGi pods-running=%d last-claim-after=%s",
		seed, replicas, cpuLimit, memLimit.String(), nodesLimit, len(records), cpu.Value(), mem.Value()>>30, running, stableSince.Sub(began).Round(time.Second))
}
