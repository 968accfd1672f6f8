package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// replica is one of two Capstan processes electing a leader, as the chart's replicas: 2 runs them.
type replica struct {
	cmd *exec.Cmd
	log string
}

var replicaSeq int

func startReplica(t *testing.T) *replica {
	t.Helper()
	replicaSeq++
	r := &replica{log: filepath.Join(h.Dir, fmt.Sprintf("replica-%d.log", replicaSeq))}
	f, err := os.Create(r.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r.cmd = exec.Command(h.Binary, "--kubeconfig", h.Cluster.KubeconfigPath, "--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
		"--sim-state-file", statePath, "--batch-idle-duration=1s", "--batch-max-duration=5s",
		"--disruption-validation-period=2s", "--disruption-poll-period=2s")
	r.cmd.Stdout, r.cmd.Stderr = f, f
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return r
}

// says reports whether the replica's log has a line with text.
func (r *replica) says(text string) bool {
	b, err := os.ReadFile(r.log)
	return err == nil && strings.Contains(string(b), text)
}

func (r *replica) kill() {
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	_ = r.cmd.Wait()
}

const acquired = "cquired lease" // controller-runtime writes "Successfully acquired lease …"

// TestLeaderFailover: two replicas with leader election; the leader is killed in the middle of a
// burst (once it has created NodeClaims) and again in the middle of a consolidation (once it
// has started disrupting nodes), each time restarted as a follower. The other replica takes the
// lease (the time it took is a figure), and afterwards every NodeClaim bought one machine, no
// machine is left without a NodeClaim, no node is left tainted for a disruption that nobody
// finishes, and the pods run.
func TestLeaderFailover(t *testing.T) {
	replicas := setting("FAILOVER_PODS", 16, 200)
	const name = "failover"
	h.Stop(syscall.SIGTERM)
	var reps []*replica
	t.Cleanup(func() {
		for _, r := range reps {
			r.kill()
			if t.Failed() {
				b, _ := os.ReadFile(r.log)
				lines := strings.Split(string(b), "\n")
				t.Logf("replica log %s, last lines:\n%s", r.log, strings.Join(lines[max(0, len(lines)-15):], "\n"))
			}
		}
		if err := start(); err != nil {
			t.Fatal(err)
		}
	})
	reps = append(reps, startReplica(t), startReplica(t))
	leader := func() *replica {
		for _, r := range reps {
			if r.cmd.ProcessState == nil && r.says(acquired) {
				return r
			}
		}
		return nil
	}
	eventually(t, "a leader", 2*time.Minute, func(context.Context) (bool, error) { return leader() != nil, nil })
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: 2 * time.Second}
		snc.Spec.InstanceTypes = []string{"m5.large", "c5.large"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(5 * time.Second)
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
	})

	// failover kills the leader once its log says text, restarts it as a follower and waits for
	// the other replica to take the lease; it returns how long that took.
	failover := func(text string) time.Duration {
		t.Helper()
		var old *replica
		eventually(t, "the leader at "+text, 5*time.Minute, func(context.Context) (bool, error) {
			old = leader()
			return old != nil && old.says(text), nil
		})
		old.kill()
		killed := time.Now()
		for i, r := range reps {
			if r == old {
				reps[i] = startReplica(t)
			}
		}
		eventually(t, "another leader", 2*time.Minute, func(context.Context) (bool, error) { return leader() != nil, nil })
		return time.Since(killed)
	}

	spreadDeployment(t, name, name, int32(replicas))
	burstTakeover := failover(`"message":"created nodeclaim"`)
	eventually(t, "every pod Running after the burst's failover", 10*time.Minute, h.Running(t, name, replicas))
	h.Scale(t, name, int32(replicas/2))
	consolidationTakeover := failover(`"message":"disrupting node(s)"`)
	eventually(t, "the emptied nodes gone after the consolidation's failover", 10*time.Minute, func(ctx context.Context) (bool, error) {
		return len(h.Claims(t, name)) == replicas/2, nil
	})
	eventually(t, "the remaining pods Running", 5*time.Minute, h.Running(t, name, replicas/2))

	tainted := taintedIdle(t)
	orphans, most := machinesOfClaims(t, name)
	if tainted != 0 {
		t.Errorf("%d nodes left tainted %s and not being deleted", tainted, karpv1.DisruptedTaintKey)
	}
	figures("leader-failover pods=%d then %d kills=2 (mid-burst, mid-consolidation) takeover=%s,%s machines-per-claim(max)=%d orphans-after-gc=%d tainted-idle=%d",
		replicas, replicas/2, burstTakeover.Round(100*time.Millisecond), consolidationTakeover.Round(100*time.Millisecond), most, orphans, tainted)
}
