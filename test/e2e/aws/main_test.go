// Package aws runs Capstan's AWS provider end to end on the local cluster: the capstan binary
// with --cloud-provider aws against the local AWS endpoints (test/awsfake), whose instances
// register as Nodes that kwok runs pods on.
package aws

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
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/localcluster"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
)

const (
	cluster = "capstan-e2e"
	queue   = "capstan-e2e-interruption"
)

type suite struct {
	dir, binary, capstanLog string
	// kubeconfig impersonates the chart's ServiceAccount.
	kubeconfig  string
	cluster     *localcluster.Cluster
	client      client.Client
	aws         *awsfake.Server
	capstan     *exec.Cmd
	stopKubelet context.CancelFunc
}

var s suite

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	dir, err := os.MkdirTemp("", "capstan-e2e-aws-")
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
	if s.aws, err = awsfake.New(awsfake.Options{ClusterName: cluster}); err != nil {
		return 0, err
	}
	s.aws.CreateQueue(queue+"-dlq", "", 0)
	s.aws.CreateQueue(queue, queue+"-dlq", 3)
	if err := s.aws.Start(); err != nil {
		return 0, err
	}
	defer s.aws.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s.stopKubelet = cancel
	go func() { _ = (&awsfake.Kubelet{Server: s.aws, Client: s.client, Kwok: true}).Start(ctx) }()
	defer cancel()
	if err := installChart(root); err != nil {
		return 0, err
	}
	s.capstanLog = filepath.Join(dir, "capstan.log")
	if err := startCapstan(); err != nil {
		return 0, err
	}
	defer stopCapstan(syscall.SIGTERM)
	code := m.Run()
	if keep := os.Getenv("CAPSTAN_E2E_KEEP_LOG"); keep != "" {
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
	metrics := l.Addr().String()
	_ = l.Close()
	// Capstan acts as the chart's ServiceAccount, with leader election as the chart runs it.
	cmd := exec.Command(s.binary, "--kubeconfig", s.kubeconfig, "--leader-election-namespace="+chartNamespace,
		"--metrics-bind-address="+metrics, "--health-probe-bind-address=127.0.0.1:0",
		"--cloud-provider=aws", "--cluster-name="+cluster, "--aws-endpoint-url="+s.aws.URL(), "--aws-region="+s.aws.Region(),
		"--interruption-queue="+queue, "--batch-idle-duration=1s", "--batch-max-duration=10s",
		"--disruption-validation-period=2s", "--disruption-poll-period=2s")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=e2e", "AWS_SECRET_ACCESS_KEY=e2e", "AWS_EC2_METADATA_DISABLED=true")
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

// eventually polls cond until it holds; the timeout only bounds a broken run.
func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(t.Context(), 500*time.Millisecond, timeout, true, cond); err != nil {
		dump(t)
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// manifests reads a file of examples/aws with the placeholders filled and creates its objects,
// deleting them when the test ends (the NodePool's machines first).
func manifests(t testing.TB, file string, edit func(client.Object)) []client.Object {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "examples", "aws", file))
	if err != nil {
		t.Fatal(err)
	}
	ami := s.aws.Parameter("/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id")
	text := strings.NewReplacer("${CLUSTER_NAME}", cluster, "${AMI_ID}", ami, "${SECURITY_GROUP_ID}", "sg-0nodes00000000001").Replace(string(b))
	var objs []client.Object
	for _, doc := range strings.Split(text, "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		var o client.Object
		switch meta.Kind {
		case "EC2NodeClass":
			o = &awsv1.EC2NodeClass{}
		case "NodePool":
			o = &karpv1.NodePool{}
		case "Deployment":
			o = &appsv1.Deployment{}
		default:
			t.Fatalf("%s: unexpected kind %q", file, meta.Kind)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), o); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(o)
		}
		if err := s.client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for i := len(objs) - 1; i >= 0; i-- {
			o := objs[i]
			_ = s.client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationForeground))
			if np, ok := o.(*karpv1.NodePool); ok {
				_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
					return len(claims(t, np.Name)) == 0, nil
				})
			}
		}
	})
	return objs
}

func claims(t testing.TB, pool string) []karpv1.NodeClaim {
	t.Helper()
	l := &karpv1.NodeClaimList{}
	if err := s.client.List(context.Background(), l, client.MatchingLabels{karpv1.NodePoolLabelKey: pool}); err != nil {
		t.Fatal(err)
	}
	return l.Items
}

// running says whether n pods of app run.
func running(t testing.TB, app string, n int) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		l := &corev1.PodList{}
		if err := s.client.List(ctx, l, client.InNamespace("default"), client.MatchingLabels{"app": app}); err != nil {
			return false, err
		}
		ok := 0
		for _, p := range l.Items {
			if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp.IsZero() {
				ok++
			}
		}
		return ok == n, nil
	}
}

// workers is a deployment of n pods of one CPU that select the pool's label and tolerate its
// taint (if any).
func workers(t testing.TB, name string, n int32, selector map[string]string, tolerations []corev1.Toleration) *appsv1.Deployment {
	t.Helper()
	return workersOf(t, name, n, "1", "1Gi", selector, tolerations)
}

// workersOf is workers with pods requesting cpu and mem.
func workersOf(t testing.TB, name string, n int32, cpu, mem string, selector map[string]string, tolerations []corev1.Toleration) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	grace := int64(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace, NodeSelector: selector, Tolerations: tolerations,
				Containers: []corev1.Container{{Name: "w", Image: "pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}},
			}}},
	}
	if err := s.client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.client.Delete(context.Background(), d, client.PropagationPolicy(metav1.DeletePropagationForeground))
	})
	return d
}

// dump logs the cluster's nodes, claims and pods, and the cloud's instances, for a failure.
func dump(t testing.TB) {
	ctx := context.Background()
	nodes := &corev1.NodeList{}
	_ = s.client.List(ctx, nodes)
	for _, n := range nodes.Items {
		t.Logf("node %s providerID %s taints %v deleting %v", n.Name, n.Spec.ProviderID, n.Spec.Taints, !n.DeletionTimestamp.IsZero())
	}
	ncs := &karpv1.NodeClaimList{}
	_ = s.client.List(ctx, ncs)
	for _, nc := range ncs.Items {
		t.Logf("nodeclaim %s providerID %s node %s conditions %v", nc.Name, nc.Status.ProviderID, nc.Status.NodeName, nc.Status.Conditions)
	}
	pods := &corev1.PodList{}
	_ = s.client.List(ctx, pods, client.InNamespace("default"))
	for _, p := range pods.Items {
		t.Logf("pod %s phase %s node %s conditions %v", p.Name, p.Status.Phase, p.Spec.NodeName, p.Status.Conditions)
	}
	for _, i := range s.aws.Instances() {
		t.Logf("instance %s %s %s %s claim %s", i.ID, i.Type, i.Lifecycle, i.State, i.Tags["karpenter.sh/nodeclaim"])
	}
	// What Capstan said last, past its controllers' start-up lines: why it did what it did.
	if b, err := os.ReadFile(s.capstanLog); err == nil {
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
