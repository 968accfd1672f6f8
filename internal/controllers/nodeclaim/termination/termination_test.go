package termination

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/nodeclaim/lifecycle"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

type fixture struct {
	rec       *events.FakeRecorder
	clk       *clocktesting.FakeClock
	cloud     *sim.Cloud
	lifecycle *lifecycle.Controller
	ctrl      *Controller
}

// readyClaim makes a NodeClaim with a registered node, as the lifecycle controller leaves it.
func readyClaim(t *testing.T, name string, tgp time.Duration) *fixture {
	t.Helper()
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.xlarge"}}})
	sc := simtest.New(t, env.Client)
	clk, p := sc.Clock, sc.Provider
	rec := events.NewFakeRecorder(1000)
	f := &fixture{rec: rec, clk: clk, cloud: sc.Cloud,
		lifecycle: &lifecycle.Controller{Client: env.Client, Cloud: p, Clock: clk, Recorder: rec},
		ctrl:      &Controller{Client: env.Client, Cloud: p, Clock: clk, Recorder: rec}}
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef:           &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: name},
			Requirements:           karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}},
			TerminationGracePeriod: &metav1.Duration{Duration: tgp},
		}}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	simtest.CleanupClaim(t, env.Client, name)
	req := reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}
	if _, err := f.lifecycle.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	clk.Step(5 * time.Second)
	if err := sc.Joiner.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lifecycle.Reconcile(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) reconcile(t *testing.T, name string) {
	t.Helper()
	if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
}

func boundPod(t *testing.T, name, node string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	return boundPodWith(t, name, node, func(p *corev1.Pod) { p.Annotations = annotations })
}

// boundPodWith creates a running pod on node, changed by mutate before it is created.
func boundPodWith(t *testing.T, name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	grace := int64(30)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{NodeName: node, TerminationGracePeriodSeconds: &grace, Containers: []corev1.Container{{Name: "c", Image: "x",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
	}
	mutate(p)
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	// Running and ready, as the kubelet would report: the Eviction API ignores budgets for
	// pending pods.
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	if err := env.Client.Status().Update(t.Context(), p); err != nil {
		t.Fatal(err)
	}
	return p
}

// kubelet finishes what a kubelet would: pods being deleted go away.
func kubelet(t *testing.T, node string) (left []string) {
	t.Helper()
	pods := &corev1.PodList{}
	if err := env.Client.List(t.Context(), pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			if err := env.Client.Delete(t.Context(), p, client.GracePeriodSeconds(0)); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			continue
		}
		left = append(left, p.Name)
	}
	return left
}

func condition(t *testing.T, name, typ string) metav1.ConditionStatus {
	t.Helper()
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(nc.Status.Conditions, typ); c != nil {
		return c.Status
	}
	return ""
}

// pdbPodEvents drains the recorder and counts the pod events of evictions PodDisruptionBudget
// default/guarded blocked.
func pdbPodEvents(f *fixture) int {
	n := 0
	for len(f.rec.Events) > 0 {
		if e := <-f.rec.Events; strings.Contains(e, "Eviction blocked by PodDisruptionBudget default/guarded: ") {
			n++
		}
	}
	return n
}

// wantGone asserts that the claim, its node and its machine are gone.
func wantGone(t *testing.T, f *fixture, name string) {
	t.Helper()
	if n := f.cloud.Instances(); len(n) != 0 {
		t.Fatalf("%d instance(s) left", len(n))
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &corev1.Node{}); !apierrors.IsNotFound(err) {
		t.Fatalf("node still there: %v", err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, &karpv1.NodeClaim{}); !apierrors.IsNotFound(err) {
		t.Fatalf("nodeclaim still there: %v", err)
	}
}

func TestDrainRespectsPDBAndDoNotDisruptUntilTheGracePeriod(t *testing.T) {
	const name = "drain-1"
	f := readyClaim(t, name, time.Hour)
	boundPod(t, "free", name, nil)
	boundPod(t, "guarded", name, nil)
	boundPod(t, "pinned", name, map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"})
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if err := env.Client.Create(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pdb) })
	// What the disruption controller of kube-controller-manager would report (envtest runs none).
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: 0,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if err := env.Client.Status().Update(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}

	if err := env.Client.Delete(t.Context(), &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, name)
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, node); err != nil {
		t.Fatal(err)
	}
	tainted := false
	for _, tn := range node.Spec.Taints {
		tainted = tainted || tn.Key == karpv1.DisruptedTaintKey
	}
	if !tainted {
		t.Fatal("node not tainted karpenter.sh/disrupted")
	}
	left := kubelet(t, name)
	if len(left) != 2 {
		t.Fatalf("pods left after the first eviction round: %v, want guarded and pinned", left)
	}
	// The guarded pod is told which PDB blocks it, once a minute however often the drain retries.
	if n := pdbPodEvents(f); n != 1 {
		t.Fatalf("%d pod events naming PodDisruptionBudget default/guarded after the first round, want 1", n)
	}
	f.clk.Step(10 * time.Second)
	f.reconcile(t, name)
	if n := pdbPodEvents(f); n != 0 {
		t.Fatalf("%d more pod events 10 s later, want none within the minute", n)
	}
	// Still blocked well before the deadline.
	f.clk.Step(30 * time.Minute)
	f.reconcile(t, name)
	if n := pdbPodEvents(f); n != 1 {
		t.Fatalf("%d pod events half an hour later, want 1 again", n)
	}
	if left := kubelet(t, name); len(left) != 2 {
		t.Fatalf("a protected pod was removed before the grace period: left %v", left)
	}
	if s := condition(t, name, karpv1.ConditionTypeDrained); s != metav1.ConditionFalse {
		t.Fatalf("Drained = %q while pods remain", s)
	}
	if n := f.cloud.Instances(); len(n) != 1 {
		t.Fatalf("instance terminated before the drain finished")
	}
	// At deadline − the pods' 30s grace period they are deleted.
	f.clk.Step(30*time.Minute - 30*time.Second)
	f.reconcile(t, name)
	if left := kubelet(t, name); len(left) != 0 {
		t.Fatalf("pods left at the deadline: %v", left)
	}
	f.reconcile(t, name)
	wantGone(t, f, name)
}

func TestDeletingTheNodeDeletesTheClaim(t *testing.T) {
	const name = "nodedel-1"
	f := readyClaim(t, name, time.Minute)
	if err := env.Client.Delete(t.Context(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
	f.reconcile(t, name) // deletes the claim
	f.reconcile(t, name) // terminates it
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, nc); !apierrors.IsNotFound(err) {
		t.Fatalf("nodeclaim still there: %v: %+v %+v", err, nc.ObjectMeta, nc.Status)
	}
	if len(f.cloud.Instances()) != 0 {
		t.Fatal("instance left behind")
	}
}
