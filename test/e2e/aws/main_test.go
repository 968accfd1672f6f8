// Package aws runs Capstan's AWS provider end to end on the local cluster: the capstan binary
// with --cloud-provider aws against the local AWS endpoints (test/awsfake), whose instances
// register as Nodes that kwok runs pods on.
package aws

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/e2e"
)

const (
	cluster = "capstan-e2e"
	queue   = "capstan-e2e-interruption"
)

// suite is the harness (the cluster and the running capstan) shared by the tests, and what this
// package adds: the local AWS endpoints and the kubeconfig of the chart's ServiceAccount.
type suite struct {
	*e2e.Harness
	// kubeconfig impersonates the chart's ServiceAccount.
	kubeconfig string
	aws        *awsfake.Server
}

var s suite

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	e2e.Main(m, "capstan-e2e-aws-", &s.Harness, func(h *e2e.Harness) (func(), error) {
		var err error
		if s.aws, err = awsfake.New(awsfake.Options{ClusterName: cluster}); err != nil {
			return nil, err
		}
		s.aws.CreateQueue(queue+"-dlq", "", 0)
		s.aws.CreateQueue(queue, queue+"-dlq", 3)
		if err := s.aws.Start(); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = (&awsfake.Kubelet{Server: s.aws, Client: s.Client, Kwok: true}).Start(ctx) }()
		teardown := func() { cancel(); s.aws.Close() }
		if err := installChart(h.Root); err != nil {
			return teardown, err
		}
		return teardown, startCapstan()
	})
}

func startCapstan() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	metrics := l.Addr().String()
	_ = l.Close()
	// Capstan acts as the chart's ServiceAccount, with leader election as the chart runs it.
	return s.Start([]string{"--kubeconfig", s.kubeconfig, "--leader-election-namespace=" + chartNamespace,
		"--metrics-bind-address=" + metrics, "--health-probe-bind-address=127.0.0.1:0",
		"--cloud-provider=aws", "--cluster-name=" + cluster, "--aws-endpoint-url=" + s.aws.URL(), "--aws-region=" + s.aws.Region(),
		"--interruption-queue=" + queue, "--batch-idle-duration=1s", "--batch-max-duration=10s",
		"--disruption-validation-period=2s", "--disruption-poll-period=2s"},
		"AWS_ACCESS_KEY_ID=e2e", "AWS_SECRET_ACCESS_KEY=e2e", "AWS_EC2_METADATA_DISABLED=true")
}

func stopCapstan(sig syscall.Signal) { s.Stop(sig) }

// eventually polls cond until it holds; the timeout only bounds a broken run, which dump
// describes.
func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	e2e.Eventually(t, what, timeout, cond, dump)
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
		if err := s.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, o)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for i := len(objs) - 1; i >= 0; i-- {
			o := objs[i]
			_ = s.Client.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationForeground))
			switch o := o.(type) {
			case *karpv1.NodePool:
				_ = wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
					return len(claims(t, o.Name)) == 0, nil
				})
			case *awsv1.EC2NodeClass:
				// Gone (its finalizer done) before a later test makes a class of the same name.
				_ = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
					return apierrors.IsNotFound(s.Client.Get(ctx, client.ObjectKeyFromObject(o), &awsv1.EC2NodeClass{})), nil
				})
			}
		}
	})
	return objs
}

func claims(t testing.TB, pool string) []karpv1.NodeClaim { t.Helper(); return s.Claims(t, pool) }

// running says whether n pods of app run.
func running(t testing.TB, app string, n int) func(context.Context) (bool, error) {
	return s.Running(t, app, n)
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
	if err := s.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.Delete(context.Background(), d, client.PropagationPolicy(metav1.DeletePropagationForeground))
	})
	return d
}

// dump logs what the harness shows of a failure, and the cloud's instances.
func dump(t testing.TB) {
	s.Dump(t)
	for _, i := range s.aws.Instances() {
		t.Logf("instance %s %s %s %s claim %s", i.ID, i.Type, i.Lifecycle, i.State, i.Tags["karpenter.sh/nodeclaim"])
	}
}
