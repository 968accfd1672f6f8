package snapshot

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// The pods a disruption may move — pending, and those on the nodes Capstan manages — carry the
// cluster's default topology spread constraints, so a consolidation does not plan what the
// kube-scheduler will refuse.
func TestMovablePodsCarryTheDefaultSpread(t *testing.T) {
	ctx := t.Context()
	sc := simtest.New(t, env.Client)
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "snap"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}})
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "snap"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "snap"}
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "snap-1", Labels: map[string]string{karpv1.NodePoolLabelKey: "snap"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: karpv1.Requirements{}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "snap-1"}, Spec: corev1.NodeSpec{ProviderID: "sim://snap-1"}}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "snap-"}}
	for _, o := range []client.Object{np, nc, node, ns} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	nc.Status.ProviderID = node.Spec.ProviderID
	if err := env.Client.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns.Name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}}}}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"bound", "pending"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
		if name == "bound" {
			p.Spec.NodeName = node.Name
		}
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		if name == "pending" {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
			if err := env.Client.Status().Update(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	spread := &defaultspread.Applier{Reader: env.Client, Constraints: []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule}}}
	snap, err := Read(ctx, env.Client, sc.Provider, Options{Now: time.Now(), DefaultSpread: spread})
	if err != nil {
		t.Fatal(err)
	}
	var moving []*corev1.Pod
	moving = append(moving, snap.Pending...)
	for _, n := range snap.Nodes {
		moving = append(moving, n.Pods...)
	}
	seen := 0
	for _, p := range moving {
		if p.Namespace != ns.Name {
			continue
		}
		seen++
		if len(p.Spec.TopologySpreadConstraints) != 1 || p.Spec.TopologySpreadConstraints[0].LabelSelector.MatchLabels["app"] != "web" {
			t.Errorf("pod %s: constraints %+v, want the zone default selecting app=web", p.Name, p.Spec.TopologySpreadConstraints)
		}
	}
	if seen != 2 {
		t.Fatalf("the snapshot holds %d of the namespace's pods, want the bound and the pending one", seen)
	}
}
