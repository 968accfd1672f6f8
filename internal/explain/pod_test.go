package explain

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func create(t *testing.T, objs ...interface {
	metav1.Object
	runtime.Object
}) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
}

// Three pending pods, each kept from its NodePool by one thing — a taint it does not tolerate,
// the pool's limit, no instance type large enough — and a fourth that fits: explain names each
// reason exactly, the NodePool it came closest with and what would make it fit.
func TestExplainPendingPods(t *testing.T) {
	class := func(name string, types ...string) *simv1alpha1.SimNodeClass {
		return &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: types}}
	}
	pool := func(name, cls, team string, mutate func(*karpv1.NodePool)) *karpv1.NodePool {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
		np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": team}
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: cls}
		if mutate != nil {
			mutate(np)
		}
		return np
	}
	create(t, class("explain-large", "m5.large", "m5.xlarge", "m5.2xlarge"), class("explain-small", "m5.large"),
		pool("explain-gpu", "explain-large", "ml", func(np *karpv1.NodePool) {
			np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}}
		}),
		pool("explain-capped", "explain-large", "web", func(np *karpv1.NodePool) {
			np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}),
		pool("explain-small", "explain-small", "batch", nil),
		pool("explain-open", "explain-large", "search", nil))
	sim := simtest.New(t, env.Client)
	pod := func(name, team, cpu string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"team": team},
			Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}
		create(t, p)
		return p
	}
	for _, tc := range []struct {
		pod  *corev1.Pod
		want string
	}{
		{pod("trainer", "ml", "1"), `Pod default/trainer is pending: no NodePool can launch a machine for it.
Closest: NodePool explain-gpu (taint): taint nvidia.com/gpu:NoSchedule not tolerated.
To fit there: add a toleration for the taint to the pod, or use a NodePool without it.
`},
		{pod("frontend", "web", "2"), `Pod default/frontend is pending: no NodePool can launch a machine for it.
Closest: NodePool explain-capped (limits): limits exhausted: cpu 1 left, too little for any instance type.
To fit there: raise the NodePool's spec.limits, or free capacity in it.
`},
		{pod("cruncher", "batch", "3"), `Pod default/cruncher is pending: no NodePool can launch a machine for it.
Closest: NodePool explain-small (resources): no instance type has cpu 3 (the largest has cpu 1930m).
To fit there: request less, or let the NodePool use larger instance types.
`},
		{pod("indexer", "search", "1"), `Pod default/indexer is pending; provisioning launches a machine for it from NodePool explain-open: m5.large, m5.xlarge, m5.2xlarge`},
	} {
		a, err := Pod(t.Context(), env.Client, sim.Provider, 0, tc.pod)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := a.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(out.String(), tc.want) {
			t.Errorf("explain pod %s:\n%s\nwant it to start:\n%s", tc.pod.Name, out.String(), tc.want)
		}
		if a.Closest != nil && !strings.Contains(out.String(), "NODEPOOL") {
			t.Errorf("explain pod %s: no per-NodePool table:\n%s", tc.pod.Name, out.String())
		}
	}
}
