package autoscaling

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/localcluster"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/testenv"
)

// suite is the cluster and the running capstan shared by the tests.
type suite struct {
	dir        string
	cluster    *localcluster.Cluster
	client     client.Client
	binary     string
	statePath  string
	capstan    *exec.Cmd
	capstanLog string
	// metricsAddr is where the running capstan serves /metrics.
	metricsAddr string
}

var s suite

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "capstan-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	s.dir = dir
	assets, err := testenv.AssetsDir()
	if err != nil {
		return 0, err
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		return 0, err
	}
	s.binary = filepath.Join(dir, "capstan")
	build := exec.Command("go", "build", "-o", s.binary, "./cmd/capstan")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("building capstan: %v\n%s", err, out)
	}
	opts := localcluster.Options{Dir: filepath.Join(dir, "cluster"), AssetsDir: assets, Log: logr.Discard()}
	if q := os.Getenv("CAPSTAN_E2E_KCM_QPS"); q != "" {
		// For benchmarks: how fast the controller manager may create a Deployment's pods.
		if opts.ControllerManagerQPS, err = strconv.Atoi(q); err != nil {
			return 0, fmt.Errorf("CAPSTAN_E2E_KCM_QPS=%q: %w", q, err)
		}
	}
	s.cluster, err = localcluster.Start(context.Background(), opts)
	if err != nil {
		return 0, err
	}
	defer s.cluster.Stop()
	sch, err := scheme.New()
	if err != nil {
		return 0, err
	}
	if s.client, err = client.New(s.cluster.Config, client.Options{Scheme: sch}); err != nil {
		return 0, err
	}
	s.statePath = filepath.Join(dir, "sim-cloud.json")
	s.capstanLog = filepath.Join(dir, "capstan.log")
	if err := startCapstan(); err != nil {
		return 0, err
	}
	defer stopCapstan(syscall.SIGTERM)
	code := m.Run()
	if keep := os.Getenv("CAPSTAN_E2E_KEEP_LOG"); keep != "" {
		// For looking into a run afterwards (benchmarks): the harness's directory is removed.
		if b, err := os.ReadFile(s.capstanLog); err == nil {
			_ = os.WriteFile(keep, b, 0o644)
		}
	}
	if code != 0 {
		if b, err := os.ReadFile(s.capstanLog); err == nil {
			lines := strings.Split(string(b), "\n")
			fmt.Fprintln(os.Stderr, "last lines of capstan's log:")
			fmt.Fprintln(os.Stderr, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	}
	return code, nil
}

func startCapstan() error {
	f, err := os.OpenFile(s.capstanLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.metricsAddr = l.Addr().String()
	_ = l.Close()
	cmd := exec.Command(s.binary, "--kubeconfig", s.cluster.KubeconfigPath, "--disable-leader-election",
		"--metrics-bind-address="+s.metricsAddr, "--health-probe-bind-address=127.0.0.1:0", "--sim-state-file", s.statePath,
		"--batch-idle-duration=1s", "--batch-max-duration=10s",
		// Off by default (as in Karpenter); on here so that TestNodeOverlay… and TestStaticPool…
		// run, and every other test runs with the overlays' evaluation and node repair in the way
		// (no overlay selects its pool; its nodes stay Ready).
		"--feature-gates=NodeOverlay=true,StaticCapacity=true,NodeRepair=true,CapacityBuffer=true",
		// Disruption rounds as in production, only with a shorter wait before acting.
		"--disruption-validation-period=2s", "--disruption-poll-period=2s")
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting capstan: %w", err)
	}
	s.capstan = cmd
	return nil
}

func stopCapstan(sig syscall.Signal) {
	if s.capstan == nil || s.capstan.Process == nil {
		return
	}
	_ = s.capstan.Process.Signal(sig)
	_ = s.capstan.Wait()
	s.capstan = nil
}

// cloudState reads the simulated cloud's machines and launch counts from its state file.
func cloudState(t testing.TB) (instances map[string]*sim.Instance, creates map[string]int) {
	t.Helper()
	instances, creates, err := sim.ReadFileStore(s.statePath)
	if err != nil {
		t.Fatal(err)
	}
	return instances, creates
}

// poolLabel isolates tests: each pool labels its machines, each test's pods select them.
const poolLabel = "e2e.capstan.dev/pool"

// pool creates a SimNodeClass and NodePool named name.
func pool(t testing.TB, name string, mutateClass func(*simv1alpha1.SimNodeClass), mutate func(*karpv1.NodePool)) *karpv1.NodePool {
	t.Helper()
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a", "zone-b", "zone-c"}}}
	if mutateClass != nil {
		mutateClass(snc)
	}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{poolLabel: name}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: name}
	if mutate != nil {
		mutate(np)
	}
	for _, o := range []client.Object{snc, np} {
		if err := s.client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = s.client.Delete(ctx, np)
		_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			ncs := &karpv1.NodeClaimList{}
			err := s.client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: name})
			return err == nil && len(ncs.Items) == 0, nil
		})
		_ = s.client.Delete(ctx, snc)
	})
	return np
}

// deployment creates a deployment whose pods select the pool's machines.
func deployment(t testing.TB, name, poolName string, replicas int32, cpu, mem string, mutate func(*corev1.PodSpec)) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	grace := int64(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: &grace,
					NodeSelector:                  map[string]string{poolLabel: poolName},
					Containers: []corev1.Container{{Name: "app", Image: "pause", Resources: corev1.ResourceRequirements{
						Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}},
				},
			},
		},
	}
	if mutate != nil {
		mutate(&d.Spec.Template.Spec)
	}
	if err := s.client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.client.Delete(context.Background(), d, client.PropagationPolicy(metav1.DeletePropagationForeground))
	})
	return d
}

func scale(t testing.TB, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	cur := &appsv1.Deployment{}
	if err := s.client.Get(t.Context(), client.ObjectKeyFromObject(d), cur); err != nil {
		t.Fatal(err)
	}
	orig := cur.DeepCopy()
	cur.Spec.Replicas = &replicas
	if err := s.client.Patch(t.Context(), cur, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds; the timeout only bounds a broken run.
func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

func pods(t testing.TB, app string) []corev1.Pod {
	t.Helper()
	l := &corev1.PodList{}
	if err := s.client.List(t.Context(), l, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func claims(t testing.TB, poolName string) []karpv1.NodeClaim {
	t.Helper()
	l := &karpv1.NodeClaimList{}
	if err := s.client.List(t.Context(), l, client.MatchingLabels{karpv1.NodePoolLabelKey: poolName}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func running(t testing.TB, app string, n int) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) {
		count := 0
		for _, p := range pods(t, app) {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" {
				count++
			}
		}
		return count == n, nil
	}
}
