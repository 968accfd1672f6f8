package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/localcluster"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/testenv"
)

// clusterScript runs hack/cluster.sh with the state in dir.
func clusterScript(t *testing.T, dir string, args ...string) {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(root, "hack", "cluster.sh"), args...)
	cmd.Env = append(os.Environ(), "CAPSTAN_STATE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestClusterUpRunsPodsOnKwokNodesAndDownLeavesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	clusterScript(t, dir, "up")
	pidBytes, err := os.ReadFile(filepath.Join(dir, "localcluster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidBytes)))
	if err != nil {
		t.Fatal(err)
	}
	down := func() { clusterScript(t, dir, "down") }
	t.Cleanup(down)

	// up is idempotent: a second call finds the running cluster.
	clusterScript(t, dir, "up")
	if b, _ := os.ReadFile(filepath.Join(dir, "localcluster.pid")); strings.TrimSpace(string(b)) != strconv.Itoa(pid) {
		t.Fatalf("a second cluster-up replaced the running cluster (pid %d -> %s)", pid, b)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil || string(body) != "ok" {
		t.Fatalf("GET /readyz = %q, %v; want ok", body, err)
	}

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "kwok-node-0",
			Annotations: map[string]string{localcluster.KwokNodeAnnotation: "fake"},
			Labels:      map[string]string{corev1.LabelHostname: "kwok-node-0"},
		},
	}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	orig := node.DeepCopy()
	node.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status.Allocatable = node.Status.Capacity
	// kwok updates the node too; a merge patch does not race with it.
	if err := c.Status().Patch(ctx, node, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	replicas := int32(3)
	labels := map[string]string{"app": "web"}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "web", Image: "nginx",
					Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}},
				}}},
			},
		},
	}
	if err := c.Create(ctx, deploy); err != nil {
		t.Fatal(err)
	}
	// The controller manager makes the pods, the scheduler binds them, kwok runs them.
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods, client.InNamespace("default"), client.MatchingLabels(labels)); err != nil {
			return false, err
		}
		running := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == "kwok-node-0" && p.Status.Phase == corev1.PodRunning {
				running++
			}
		}
		return running == int(replicas), nil
	})
	if err != nil {
		t.Fatalf("waiting for %d pods Running on the kwok node: %v", replicas, err)
	}

	down()
	if err := syscall.Kill(pid, 0); err == nil {
		t.Errorf("the local cluster process %d still runs after cluster-down", pid)
	}
	if err := syscall.Kill(-pid, 0); err == nil {
		t.Errorf("processes of the local cluster's group %d still run after cluster-down", pid)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("cluster-down left its state directory %s (stat: %v)", dir, err)
	}
	// down is idempotent.
	down()
}
