package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/localcluster"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/testenv"
)

// Harness is what an end-to-end package runs on: a local cluster, and the capstan binary built
// from this module, run as a process whose output goes to a log file. The simulated-cloud
// package (test/e2e/autoscaling) and the AWS one (test/e2e/aws) share it; each starts capstan
// with its own provider's flags.
type Harness struct {
	// Dir is the harness's temporary directory; Binary the capstan binary in it; Log its
	// output, appended to at each start; Root the module's root.
	Dir, Binary, Log, Root string
	Cluster                *localcluster.Cluster
	Client                 client.Client
	// Cmd is the running capstan (nil when stopped).
	Cmd *exec.Cmd
}

// Main runs an end-to-end package's tests on a new harness: it sets one up under a temporary
// directory named after prefix, lets setup start what the package needs (capstan among it),
// runs the tests, stops capstan, and keeps or shows its log (Finish). A harness that cannot be
// set up fails the package with the reason.
func Main(m *testing.M, prefix string, h **Harness, setup func(*Harness) (teardown func(), err error)) {
	code, err := func() (int, error) {
		hs, err := Setup(prefix)
		if err != nil {
			return 0, err
		}
		defer hs.Close()
		*h = hs
		teardown, err := setup(hs)
		if teardown != nil {
			defer teardown()
		}
		if err != nil {
			return 0, err
		}
		defer hs.Stop(syscall.SIGTERM)
		code := m.Run()
		hs.Finish(code)
		return code, nil
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

// Setup makes the directory, builds capstan and starts the local cluster (CAPSTAN_E2E_KCM_QPS,
// for benchmarks, sets how fast its controller manager creates a Deployment's pods). Close
// undoes it.
func Setup(prefix string) (*Harness, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	h := &Harness{Dir: dir, Binary: filepath.Join(dir, "capstan"), Log: filepath.Join(dir, "capstan.log")}
	if err := h.setup(); err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func (h *Harness) setup() error {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	if h.Root, err = testenv.ModuleRoot(); err != nil {
		return err
	}
	build := exec.Command("go", "build", "-o", h.Binary, "./cmd/capstan")
	build.Dir = h.Root
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building capstan: %v\n%s", err, out)
	}
	opts := localcluster.Options{Dir: filepath.Join(h.Dir, "cluster"), AssetsDir: assets, Log: logr.Discard()}
	if q := os.Getenv("CAPSTAN_E2E_KCM_QPS"); q != "" {
		if opts.ControllerManagerQPS, err = strconv.Atoi(q); err != nil {
			return fmt.Errorf("CAPSTAN_E2E_KCM_QPS=%q: %w", q, err)
		}
	}
	if h.Cluster, err = localcluster.Start(context.Background(), opts); err != nil {
		return err
	}
	sch, err := scheme.New()
	if err != nil {
		return err
	}
	h.Client, err = client.New(h.Cluster.Config, client.Options{Scheme: sch})
	return err
}

// Close stops capstan and the cluster and removes the directory.
func (h *Harness) Close() {
	h.Stop(syscall.SIGKILL)
	if h.Cluster != nil {
		h.Cluster.Stop()
	}
	_ = os.RemoveAll(h.Dir)
}

// Start runs capstan with args, env added to this process's environment; it dies with the test
// process.
func (h *Harness) Start(args []string, env ...string) error {
	f, err := os.OpenFile(h.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(h.Binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting capstan: %w", err)
	}
	h.Cmd = cmd
	return nil
}

// Stop signals capstan and waits for it to exit.
func (h *Harness) Stop(sig syscall.Signal) {
	if h.Cmd == nil || h.Cmd.Process == nil {
		return
	}
	_ = h.Cmd.Process.Signal(sig)
	_ = h.Cmd.Wait()
	h.Cmd = nil
}

// Finish keeps capstan's log where CAPSTAN_E2E_KEEP_LOG says (for looking into a benchmark
// afterwards: the directory is removed), and after failed tests prints its last lines.
func (h *Harness) Finish(code int) {
	if keep := os.Getenv("CAPSTAN_E2E_KEEP_LOG"); keep != "" {
		if b, err := os.ReadFile(h.Log); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
		}
	}
	if code != 0 {
		if b, err := os.ReadFile(h.Log); err == nil {
			lines := strings.Split(string(b), "\n")
			fmt.Fprintln(os.Stderr, "last lines of capstan's log:")
			fmt.Fprintln(os.Stderr, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
}

// Eventually polls cond until it holds; the timeout only bounds a broken run, which is then
// described by onFail (if set) before the test fails.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error), onFail func(testing.TB)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, cond); err != nil {
		if onFail != nil {
			onFail(t)
		}
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// Claims are the NodePool's NodeClaims.
func (h *Harness) Claims(t testing.TB, pool string) []karpv1.NodeClaim {
	t.Helper()
	l := &karpv1.NodeClaimList{}
	if err := h.Client.List(context.Background(), l, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// Pods are the pods of app (label app=NAME) in the default namespace.
func (h *Harness) Pods(t testing.TB, app string) []corev1.Pod {
	t.Helper()
	l := &corev1.PodList{}
	if err := h.Client.List(context.Background(), l, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// Running says whether exactly n pods of app run on a node and are not being deleted.
func (h *Harness) Running(t testing.TB, app string, n int) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		count := 0
		for _, p := range h.Pods(t, app) {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && p.DeletionTimestamp.IsZero() {
				count++
			}
		}
		return count == n, nil
	}
}

// Dump logs the cluster's nodes, NodeClaims and default-namespace pods, and the last lines
// capstan wrote past its controllers' start-up, for a failure.
func (h *Harness) Dump(t testing.TB) {
	ctx := context.Background()
	nodes := &corev1.NodeList{}
	_ = h.Client.List(ctx, nodes)
	for _, n := range nodes.Items {
		t.Logf("node %s providerID %s taints %v deleting %v", n.Name, n.Spec.ProviderID, n.Spec.Taints, !n.DeletionTimestamp.IsZero())
	}
	ncs := &karpv1.NodeClaimList{}
	_ = h.Client.List(ctx, ncs)
	for _, nc := range ncs.Items {
		t.Logf("nodeclaim %s providerID %s node %s conditions %v", nc.Name, nc.Status.ProviderID, nc.Status.NodeName, nc.Status.Conditions)
	}
	pods := &corev1.PodList{}
	_ = h.Client.List(ctx, pods, client.InNamespace("default"))
	for _, p := range pods.Items {
		t.Logf("pod %s phase %s node %s conditions %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
	}
	if b, err := os.ReadFile(h.Log); err == nil {
		var said []string
		for _, l := range strings.Split(string(b), "\n") {
			if l != "" && !strings.Contains(l, `"message":"Starting `) {
				said = append(said, l)
			}
		}
		for _, l := range said[max(0, len(said)-30):] {
			t.Logf("capstan: %s", l)
		}
	}
}
