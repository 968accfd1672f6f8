package autoscaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/planning"
)

// daemonSet creates a DaemonSet on the pool's machines whose container sets only a memory limit.
func daemonSet(t *testing.T, name, poolName string) {
	t.Helper()
	labels := map[string]string{"app": name}
	grace := int64(0)
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace,
				NodeSelector:                  map[string]string{poolLabel: poolName},
				Containers: []corev1.Container{{Name: "agent", Image: "pause", Resources: corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}}}}
	if err := s.Client.Create(t.Context(), ds); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), ds) })
}

// Karpenter v1.15's regression spec "DaemonSet should account for LimitRange Default on daemonSet
// pods for resources", on Capstan's own cluster: the namespace's LimitRange gives the DaemonSet's
// pods 2 CPU (its template asks none) and the app's pod 2 CPU (it asks 4 bytes of memory). One
// machine takes both. Before the DaemonSet's overhead followed its LimitRange, each machine
// bought came up, the DaemonSet's pod took 2 CPU of it, and another machine was bought for the
// app's pod: 68 machines in five minutes on Karpenter's suite.
func TestLimitRangeDefaultsAreTheDaemonSetsOverhead(t *testing.T) {
	lr := &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "e2e-limitrange", Namespace: "default"},
		Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{{Type: corev1.LimitTypeContainer,
			Default: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}
	if err := s.Client.Create(t.Context(), lr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), lr) })
	pool(t, "e2e-limitrange", nil, func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(0)
	})
	daemonSet(t, "e2e-lr-agent", "e2e-limitrange")
	most := watchMax(t, func(ctx context.Context) (int, error) { return len(claims(t, "e2e-limitrange")), nil })
	deployment(t, "e2e-lr-app", "e2e-limitrange", 1, "0", "4", func(spec *corev1.PodSpec) {
		spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("4")}
	})
	eventually(t, "the app and the agent Running", 3*time.Minute, func(ctx context.Context) (bool, error) {
		app, _ := running(t, "e2e-lr-app", 1)(ctx)
		agent, _ := running(t, "e2e-lr-agent", 1)(ctx)
		return app && agent, nil
	})
	if app, agent := pods(t, "e2e-lr-app")[0], pods(t, "e2e-lr-agent")[0]; app.Spec.NodeName != agent.Spec.NodeName {
		t.Fatalf("the app runs on %s, the agent on %s: want one machine for both", app.Spec.NodeName, agent.Spec.NodeName)
	}
	if n := most(); n != 1 {
		t.Fatalf("%d NodeClaims at once for one pod and a DaemonSet, want 1", n)
	}
}

// fillerNotReady is the startup taint filler lifts once its pod is bound: the app's pod cannot
// be scheduled onto a node before the filler takes its room.
var fillerNotReady = corev1.Taint{Key: "e2e.capstan.dev/filler-not-ready", Effect: corev1.TaintEffectNoSchedule}

// filler binds, on every node of the pool, a pod that asks cpu without the scheduler (as a
// node-local agent or a static pod would), then lifts the node's startup taint fillerNotReady:
// room no plan can know will be taken.
func filler(t *testing.T, poolName, cpu string) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			nodes := &corev1.NodeList{}
			if err := s.Client.List(ctx, nodes, client.MatchingLabels{poolLabel: poolName}); err == nil {
				for _, n := range nodes.Items {
					grace := int64(0)
					p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "filler-" + n.Name, Namespace: "default", Labels: map[string]string{"app": "filler"}},
						Spec: corev1.PodSpec{NodeName: n.Name, TerminationGracePeriodSeconds: &grace,
							Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
							Containers: []corev1.Container{{Name: "c", Image: "pause", Resources: corev1.ResourceRequirements{
								Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}}}}}}
					if err := s.Client.Create(ctx, p); err != nil && !apierrors.IsAlreadyExists(err) {
						t.Logf("binding a filler to %s: %v", n.Name, err)
						continue
					}
					isFiller := func(x corev1.Taint) bool { return x.MatchTaint(&fillerNotReady) }
					if slices.ContainsFunc(n.Spec.Taints, isFiller) {
						orig := n.DeepCopy()
						n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, isFiller)
						_ = s.Client.Patch(ctx, &n, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = s.Client.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace("default"), client.MatchingLabels{"app": "filler"},
			client.GracePeriodSeconds(0))
	})
}

// The runaway guard, end to end: something the plan cannot see takes each new machine's room
// (filler), so the app's pod never binds to the machines bought for it. It gets two machines
// and an event that says why, and then no more, however many provisioning passes follow — here
// the passes that buy a machine for another pool's pod — until an input of the plans changes.
func TestAPodItsMachinesCameUpWithoutGetsTwoThenWaits(t *testing.T) {
	pool(t, "e2e-runaway", nil, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{
			{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large"}},
			{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
		np.Spec.Template.Spec.StartupTaints = karpv1.Taints{fillerNotReady}
		// The empty machines stay: the guard alone must bound them.
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(time.Hour)
	})
	// Created first: a NodePool created later changes the plan's inputs, which lifts the hold.
	pool(t, "e2e-runaway-other", nil, nil)
	filler(t, "e2e-runaway", "1500m")
	most := watchMax(t, func(ctx context.Context) (int, error) { return len(claims(t, "e2e-runaway")), nil })
	deployment(t, "e2e-runaway-app", "e2e-runaway", 1, "1", "256Mi", nil)
	eventually(t, "the app's pod held", 4*time.Minute, func(ctx context.Context) (bool, error) {
		ps := pods(t, "e2e-runaway-app")
		return len(ps) == 1 && len(planning.Missed(&ps[0], annotatedInputs(ps[0]))) >= planning.MaxMissedMachines, nil
	})
	pod := pods(t, "e2e-runaway-app")[0]
	eventFor(t, "Pod", pod.Name, "LaunchHeld", fmt.Sprintf("did not schedule on the %d machines bought for it", planning.MaxMissedMachines))

	deployment(t, "e2e-runaway-other", "e2e-runaway-other", 1, "1", "256Mi", nil)
	eventually(t, "the other pool's pod Running", 3*time.Minute, running(t, "e2e-runaway-other", 1))
	if n := len(claims(t, "e2e-runaway")); n != planning.MaxMissedMachines {
		t.Fatalf("%d NodeClaims for the held pod after later passes, want %d", n, planning.MaxMissedMachines)
	}
	if n := most(); n != planning.MaxMissedMachines {
		t.Fatalf("%d NodeClaims at once for one pod, want %d", n, planning.MaxMissedMachines)
	}
	if p := pods(t, "e2e-runaway-app")[0]; p.Spec.NodeName != "" {
		t.Fatalf("the app's pod was bound to %s, want it pending (the filler took its room)", p.Spec.NodeName)
	}
}

// annotatedInputs is the inputs fingerprint the pod's annotation was written on.
func annotatedInputs(p corev1.Pod) string {
	inputs, _, _ := strings.Cut(p.Annotations[planning.MissedAnnotationKey], ":")
	return inputs
}
