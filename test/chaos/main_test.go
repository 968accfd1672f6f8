package chaos

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/test/e2e"
)

var (
	h         *e2e.Harness
	statePath string
)

func TestMain(m *testing.M) {
	// The scenarios' watches log through controller-runtime; nothing reads it.
	ctrllog.SetLogger(logr.Discard())
	e2e.Main(m, "capstan-chaos-", &h, func(hs *e2e.Harness) (func(), error) {
		statePath = filepath.Join(hs.Dir, "sim-cloud.json")
		return nil, start()
	})
}

// start runs capstan on the simulated cloud, its machines in statePath (which outlives every
// kill), with env added (a crash point).
func start(env ...string) error {
	return h.Start([]string{"--kubeconfig", h.Cluster.KubeconfigPath, "--disable-leader-election",
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0", "--sim-state-file", statePath,
		"--batch-idle-duration=1s", "--batch-max-duration=5s",
		"--disruption-validation-period=2s", "--disruption-poll-period=2s"}, env...)
}

var (
	setting = e2e.ChaosSetting
	figures = e2e.ChaosFigures
)

const poolLabel = "chaos.capstan.dev/pool"

// pool creates a SimNodeClass and NodePool named name (mutatePool, if any, edits the NodePool).
func pool(t testing.TB, name string, mutateClass func(*simv1alpha1.SimNodeClass), mutatePool ...func(*karpv1.NodePool)) {
	t.Helper()
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a", "zone-b", "zone-c"}}}
	if mutateClass != nil {
		mutateClass(snc)
	}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{poolLabel: name}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: name}
	for _, m := range mutatePool {
		m(np)
	}
	for _, o := range []client.Object{snc, np} {
		if err := h.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// spreadDeployment creates replicas pods of app that each need a machine of their own (required
// hostname anti-affinity), on the pool's machines.
func spreadDeployment(t testing.TB, app, poolName string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": app}
	grace := int64(0)
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				NodeSelector:                  map[string]string{poolLabel: poolName},
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}}},
				Containers: []corev1.Container{{Name: "app", Image: "pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}},
			}}},
	}
	if err := h.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	e2e.Eventually(t, what, timeout, cond, h.Dump)
}

// machinesOfClaims waits, for the pool's SimNodeClass (named as the pool), until no
// machine is left without a NodeClaim (garbage collection's window is 30 s, swept every 10 s),
// and fails the test for every NodeClaim that launched more than one machine; it returns the
// orphans left and the most machines a claim launched.
func machinesOfClaims(t *testing.T, poolName string) (orphans, most int) {
	t.Helper()
	eventually(t, "no machine without a NodeClaim", 2*time.Minute, func(ctx context.Context) (bool, error) {
		instances, _, err := sim.ReadFileStore(statePath)
		if err != nil {
			return false, err
		}
		claims := map[string]bool{}
		for _, c := range h.Claims(t, poolName) {
			claims[c.Name] = true
		}
		orphans = 0
		for _, inst := range instances {
			if inst.NodeClass == poolName && !claims[inst.NodeClaim] {
				orphans++
			}
		}
		return orphans == 0, nil
	})
	_, creates, err := sim.ReadFileStore(statePath)
	if err != nil {
		t.Fatal(err)
	}
	for claim, n := range creates {
		if n > 1 {
			t.Errorf("NodeClaim %s launched %d machines", claim, n)
		}
		most = max(most, n)
	}
	return orphans, most
}
