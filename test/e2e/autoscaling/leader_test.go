package autoscaling

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

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestOnlyTheLeaderActs runs two replicas with leader election: one takes the lease and
// provisions, the other stays idle.
func TestOnlyTheLeaderActs(t *testing.T) {
	stopCapstan(syscall.SIGTERM)
	t.Cleanup(func() {
		if err := startCapstan(); err != nil {
			t.Fatal(err)
		}
	})
	var replicas []*exec.Cmd
	var logs []string
	for i := range 2 {
		logPath := filepath.Join(s.Dir, fmt.Sprintf("replica-%d.log", i))
		f, err := os.Create(logPath)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(s.Binary, "--kubeconfig", s.Cluster.KubeconfigPath,
			"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--sim-state-file", s.statePath)
		cmd.Stdout, cmd.Stderr = f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, cmd)
		logs = append(logs, logPath)
	}
	t.Cleanup(func() {
		for _, r := range replicas {
			_ = r.Process.Signal(syscall.SIGTERM)
			_ = r.Wait()
		}
	})
	lease := &coordinationv1.Lease{}
	eventually(t, "a leader", time.Minute, func(ctx context.Context) (bool, error) {
		err := s.Client.Get(ctx, client.ObjectKey{Namespace: "kube-system", Name: "capstan-leader-election"}, lease)
		return err == nil && lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "", nil
	})
	pool(t, "e2e-leader", nil, nil)
	deployment(t, "led", "e2e-leader", 3, "1", "1Gi", nil)
	eventually(t, "pods Running", 2*time.Minute, running(t, "led", 3))
	acted := 0
	for _, l := range logs {
		b, err := os.ReadFile(l)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"message":"created nodeclaim"`) {
			acted++
		}
	}
	if acted != 1 {
		t.Fatalf("%d replicas created NodeClaims, want only the leader", acted)
	}

	// The leader, stopped, gives its lease up at once (a rollout hands over without waiting out
	// the lease's 15 seconds).
	if err := s.Client.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "capstan-leader-election"}, lease); err != nil {
		t.Fatal(err)
	}
	held := *lease.Spec.HolderIdentity
	leader := -1
	for i, l := range logs {
		if b, err := os.ReadFile(l); err == nil && strings.Contains(string(b), "cquired lease") {
			leader = i
		}
	}
	if leader < 0 {
		t.Fatal("no replica logged that it acquired the lease")
	}
	_ = replicas[leader].Process.Signal(syscall.SIGTERM)
	_ = replicas[leader].Wait()
	if err := s.Client.Get(t.Context(), client.ObjectKey{Namespace: "kube-system", Name: "capstan-leader-election"}, lease); err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity == held {
		t.Fatalf("the stopped leader %s still holds the lease", held)
	}
}
