package autoscaling

import (
	"context"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/test/e2e"
)

// suite is the harness (the cluster and the running capstan) shared by the tests, and what this
// package adds: the simulated cloud's state file and capstan's metrics address.
type suite struct {
	*e2e.Harness
	statePath string
	// metricsAddr is where the running capstan serves /metrics.
	metricsAddr string
}

var s suite

func TestMain(m *testing.M) {
	e2e.Main(m, "capstan-e2e-", &s.Harness, func(h *e2e.Harness) (func(), error) {
		s.statePath = filepath.Join(h.Dir, "sim-cloud.json")
		return nil, startCapstan()
	})
}

// startCapstan starts Capstan with the package's flags, and extra ones after them.
func startCapstan(extra ...string) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.metricsAddr = l.Addr().String()
	_ = l.Close()
	return s.Start(append([]string{"--kubeconfig", s.Cluster.KubeconfigPath, "--disable-leader-election",
		"--metrics-bind-address=" + s.metricsAddr, "--health-probe-bind-address=127.0.0.1:0", "--sim-state-file", s.statePath,
		"--batch-idle-duration=1s", "--batch-max-duration=10s",
		// Off by default (as in Karpenter); on here so that TestNodeOverlay… and TestStaticPool…
		// run, and every other test runs with the overlays' evaluation and node repair in the way
		// (no overlay selects its pool; its nodes stay Ready).
		"--feature-gates=NodeOverlay=true,StaticCapacity=true,NodeRepair=true,CapacityBuffer=true",
		// Disruption rounds as in production, only with a shorter wait before acting.
		"--disruption-validation-period=2s", "--disruption-poll-period=2s"}, extra...))
}

func stopCapstan(sig syscall.Signal) { s.Stop(sig) }

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
		if err := s.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// A test that leaves claims or machines behind fails: the pool's deletion must take them.
		ctx := context.Background()
		_ = s.Client.Delete(ctx, np)
		var left []string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			left = nil
			ncs := &karpv1.NodeClaimList{}
			if err := s.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: name}); err != nil {
				return false, nil
			}
			for _, nc := range ncs.Items {
				left = append(left, "NodeClaim "+nc.Name)
			}
			instances, _, err := sim.ReadFileStore(s.statePath)
			if err != nil {
				return false, nil
			}
			for _, inst := range instances {
				if inst.NodeClass == snc.Name {
					left = append(left, "machine "+inst.ID)
				}
			}
			return len(left) == 0, nil
		})
		if err != nil {
			t.Errorf("deleting NodePool %s left %v", name, left)
		}
		_ = s.Client.Delete(ctx, snc)
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
	if err := s.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Client.Delete(context.Background(), d, client.PropagationPolicy(metav1.DeletePropagationForeground))
	})
	return d
}

func scale(t testing.TB, d *appsv1.Deployment, replicas int32) {
	t.Helper()
	cur := &appsv1.Deployment{}
	if err := s.Client.Get(t.Context(), client.ObjectKeyFromObject(d), cur); err != nil {
		t.Fatal(err)
	}
	orig := cur.DeepCopy()
	cur.Spec.Replicas = &replicas
	if err := s.Client.Patch(t.Context(), cur, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it holds; the timeout only bounds a broken run.
func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	e2e.Eventually(t, what, timeout, cond, s.Dump)
}

func pods(t testing.TB, app string) []corev1.Pod { t.Helper(); return s.Pods(t, app) }

func claims(t testing.TB, poolName string) []karpv1.NodeClaim {
	t.Helper()
	return s.Claims(t, poolName)
}

func running(t testing.TB, app string, n int) func(context.Context) (bool, error) {
	return s.Running(t, app, n)
}
