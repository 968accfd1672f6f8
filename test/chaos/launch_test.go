package chaos

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/crashpoint"
)

// TestCrashDuringLaunches: a burst of pods that each need their own machine, while Capstan is
// killed again and again — at seeded random moments, at the crash point between the cloud's
// answer to a launch and the NodeClaim's status write, and at the one between a pass's NodeClaim
// creations and its nominations. After the last restart: every NodeClaim
// bought exactly one machine, no machine is left without a NodeClaim once garbage collection's
// window has passed, and every pod runs.
func TestCrashDuringLaunches(t *testing.T) {
	seed := setting("SEED", 1, 1)
	kills := setting("KILLS", 20, 30)
	replicas := setting("CLAIMS", 30, 500)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	const name = "crash-launch"
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		// Slow launches keep many in flight when the kills come.
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: 2 * time.Second}
		snc.Spec.InstanceTypes = []string{"m5.large", "c5.large"}
	})
	began := time.Now()
	// The burst grows before each kill, so every kill comes while launches are in flight.
	spreadDeployment(t, name, name, int32(max(1, replicas/kills)))
	atPoint := map[string]int{}
	for i := range kills {
		h.Scale(t, name, int32(max(1, (i+1)*replicas/kills)))
		h.Stop(syscall.SIGKILL)
		if r := rng.IntN(3); r < 2 {
			// Die at the k-th launch whose result is not written yet, or at the k-th pass that
			// created NodeClaims and has not nominated its pods.
			point := []string{crashpoint.LaunchCreated, crashpoint.ClaimsCreated}[r]
			if died := crashAt(t, point, 1+rng.IntN(3), 8*time.Second); died {
				atPoint[point]++
			}
			if err := start(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(300+rng.IntN(2700)) * time.Millisecond)
	}
	eventually(t, "every pod Running after the kills", 15*time.Minute, h.Running(t, name, replicas))
	running := time.Since(began)
	orphans, most := machinesOfClaims(t, name)
	claims := h.Claims(t, name)
	for _, c := range claims {
		if c.Labels[karpv1.NodePoolLabelKey] == name && c.Status.ProviderID == "" {
			t.Errorf("NodeClaim %s never recorded its machine", c.Name)
		}
	}
	figures("crash-during-launches seed=%d kills=%d (%d at %s, %d at %s) claims=%d machines-per-claim(max)=%d orphans-after-gc=%d pods-running=%d/%d all-running-after=%s",
		seed, kills, atPoint[crashpoint.LaunchCreated], crashpoint.LaunchCreated, atPoint[crashpoint.ClaimsCreated], crashpoint.ClaimsCreated,
		len(claims), most, orphans, replicas, replicas, running.Round(time.Second))
}

// crashAt starts capstan set to die at the n-th hit of point and waits up to timeout for it to
// die there (true), else kills it (false: the point was not reached n times).
func crashAt(t *testing.T, point string, n int, timeout time.Duration) bool {
	t.Helper()
	return h.CrashAt(t, start, point, n, timeout)
}
