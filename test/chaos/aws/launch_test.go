package aws

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/crashpoint"
)

// TestCrashDuringLaunchesOnAWS: a burst of pods that each need a machine, on the local AWS
// endpoints, while Capstan is killed again and again — at seeded random moments, at the crash
// point between CreateFleet's answer and the NodeClaim's status write, and at the one between a
// pass's NodeClaim creations and its nominations. After the last restart: every NodeClaim
// launched exactly one instance, counted over every instance the endpoint ever launched for the
// pool (a second purchase shows even once garbage collection has terminated it); no instance
// without a NodeClaim; every pod runs.
func TestCrashDuringLaunchesOnAWS(t *testing.T) {
	seed := setting("SEED", 1, 1)
	kills := setting("AWS_KILLS", 8, 30)
	replicas := setting("AWS_CLAIMS", 16, 500)
	rng := rand.New(rand.NewPCG(uint64(seed), 13))
	const name = "crash-launch-aws"
	pool(t, name, karpv1.CapacityTypeOnDemand, nil)
	startHere := func(env ...string) error { return start(h, env...) }
	began := time.Now()
	spreadDeployment(t, name, int32(max(1, replicas/kills)))
	atPoint := map[string]int{}
	for i := range kills {
		h.Scale(t, name, int32(max(1, (i+1)*replicas/kills)))
		h.Stop(syscall.SIGKILL)
		if r := rng.IntN(3); r < 2 {
			point := []string{crashpoint.LaunchCreated, crashpoint.ClaimsCreated}[r]
			if h.CrashAt(t, startHere, point, 1+rng.IntN(2), 20*time.Second) {
				atPoint[point]++
			}
			if err := startHere(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := startHere(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(300+rng.IntN(2700)) * time.Millisecond)
	}
	eventually(t, "every pod Running after the kills", 15*time.Minute, h.Running(t, name, replicas))
	running := time.Since(began)
	_, most := instancesPerClaim(t, name)
	claims := h.Claims(t, name)
	left := 0
	eventually(t, "no instance without a NodeClaim (garbage collection's window)", 2*time.Minute, func(context.Context) (bool, error) {
		left = orphans(t, name)
		return left == 0, nil
	})
	figures("crash-during-launches-aws seed=%d kills=%d (%d at %s, %d at %s) claims=%d instances-launched-per-claim(max)=%d orphans=%d pods-running=%d/%d all-running-after=%s",
		seed, kills, atPoint[crashpoint.LaunchCreated], crashpoint.LaunchCreated, atPoint[crashpoint.ClaimsCreated], crashpoint.ClaimsCreated,
		len(claims), most, left, replicas, replicas, running.Round(time.Second))
}
