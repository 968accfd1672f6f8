package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

// TestCloudFaults: the simulated cloud's API fails a share of its calls — throttled or a server
// error, a launch's before or after the machine starts — and (full version) hangs another share
// until Capstan's deadline for the call; meanwhile a burst of pods that each need a machine
// comes, and then half of them go. Must hold: every pod Running, every NodeClaim bought exactly
// one machine (a launch whose answer was lost is found again, not bought twice), the emptied
// machines terminated, no machine left without a NodeClaim after garbage collection's window.
// The faults injected are counted from Capstan's log.
func TestCloudFaults(t *testing.T) {
	errorsPct := setting("FAULT_ERRORS", 30, 20)
	hangsPct := setting("FAULT_HANGS", -1, 5)
	replicas := setting("FAULT_PODS", 12, 40)
	// Seed 4 fails two of the first four Creates (one before its launch, one after) at 20% and
	// 30% errors alike; each call draws from its own sequence, so the seed fixes that however
	// the calls interleave.
	faults := fmt.Sprintf("errors=%d,seed=4", errorsPct)
	if hangsPct > 0 {
		faults += fmt.Sprintf(",hangs=%d", hangsPct)
	}
	from := logSize(t)
	h.Stop(syscall.SIGTERM)
	if err := start("SIM_FAULTS=" + faults); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.Stop(syscall.SIGTERM)
		if err := start(); err != nil {
			t.Fatal(err)
		}
	})
	const name = "faults"
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: time.Second}
		snc.Spec.InstanceTypes = []string{"m5.large", "c5.large"}
	})
	began := time.Now()
	spreadDeployment(t, name, name, int32(replicas))
	eventually(t, "every pod Running through the faults", 20*time.Minute, h.Running(t, name, replicas))
	running := time.Since(began)
	h.Scale(t, name, int32(replicas/2))
	eventually(t, "the emptied machines terminated through the faults", 10*time.Minute, func(ctx context.Context) (bool, error) {
		ok, err := h.Running(t, name, replicas/2)(ctx)
		return ok && len(h.Claims(t, name)) == replicas/2, err
	})
	orphans, most := machinesOfClaims(t, name)
	injected := injectedFaults(t, from)
	if injected["Create"] == 0 {
		t.Errorf("no Create fault injected (%v): the scenario tested nothing", injected)
	}
	figures("cloud-faults faults=%s pods=%d then %d injected=%v all-running-after=%s machines-per-claim(max)=%d orphans-after-gc=%d",
		faults, replicas, replicas/2, injected, running.Round(time.Second), most, orphans)
}

// logSize is the length of Capstan's log so far: an offset for logSince.
func logSize(t *testing.T) int64 {
	t.Helper()
	fi, err := os.Stat(h.Log)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// injectedFaults counts the simulated cloud's injected faults in Capstan's log past offset, by
// call and kind ("Create error", "List hang").
func injectedFaults(t *testing.T, offset int64) map[string]int {
	t.Helper()
	out := map[string]int{}
	for line := range strings.SplitSeq(logSince(t, offset), "\n") {
		if !strings.Contains(line, "simulated cloud fault") {
			continue
		}
		var rec struct {
			Call, Fault string
			After       bool `json:"after-launch"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		out[rec.Call]++
		out[rec.Call+" "+rec.Fault]++
		if rec.After {
			out["Create after launch"]++
		}
	}
	return out
}

// logSince is Capstan's log past offset.
func logSince(t *testing.T, offset int64) string {
	t.Helper()
	b, err := os.ReadFile(h.Log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[min(offset, int64(len(b))):])
}
