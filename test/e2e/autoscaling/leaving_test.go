package autoscaling

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// initializedClaims are the pool's claims, not being deleted, that have initialized, by their
// node's name.
func initializedClaims(ctx context.Context, poolName string) (map[string]string, error) {
	ncs := &karpv1.NodeClaimList{}
	if err := s.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: poolName}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, nc := range ncs.Items {
		if nc.DeletionTimestamp.IsZero() && nc.Status.NodeName != "" && meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized) {
			out[nc.Status.NodeName] = nc.Name
		}
	}
	return out, nil
}

// TestAPodLeavingADrainingNodeFindsAMachineWaiting deletes the NodeClaim of a node whose pod is
// do-not-disrupt, with a 60 s terminationGracePeriod. Provisioning plans the pod as soon as its
// node is going away: a machine for it is up while the pod still runs on the draining node, and
// when the grace period forces the pod out its successor lands on that machine, with no launch
// after the deletion.
func TestAPodLeavingADrainingNodeFindsAMachineWaiting(t *testing.T) {
	pool(t, "e2e-leave", nil, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.TerminationGracePeriod = &metav1.Duration{Duration: 60 * time.Second}
	})
	deployment(t, "leave-pinned", "e2e-leave", 1, "1", "1Gi", func(ps *corev1.PodSpec) {})
	eventually(t, "leave-pinned Running", 2*time.Minute, running(t, "leave-pinned", 1))
	old := pods(t, "leave-pinned")[0]
	orig := old.DeepCopy()
	old.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	if err := s.Client.Patch(t.Context(), &old, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	for _, nc := range claims(t, "e2e-leave") {
		if err := s.Client.Delete(t.Context(), &nc); err != nil {
			t.Fatal(err)
		}
	}
	var waiting string
	eventually(t, "a machine up for the pinned pod while its node drains", time.Minute, func(ctx context.Context) (bool, error) {
		cur := &corev1.Pod{}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(&old), cur); err != nil || !cur.DeletionTimestamp.IsZero() {
			return false, fmt.Errorf("the pinned pod left its node (%v) before a machine was up for it", err)
		}
		up, err := initializedClaims(ctx, "e2e-leave")
		for node := range up {
			if node != old.Spec.NodeName {
				waiting = node
			}
		}
		return waiting != "", err
	})
	// Its Nominated event says where it goes, and carries the timestamps `kubectl get events
	// --sort-by=.lastTimestamp` sorts by.
	eventually(t, "the pinned pod told where it goes", time.Minute, func(ctx context.Context) (bool, error) {
		evs := &corev1.EventList{}
		if err := s.Client.List(ctx, evs, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.UID == old.UID && e.Reason == "Nominated" && strings.Contains(e.Message, "which is going away") {
				if e.LastTimestamp.IsZero() || e.FirstTimestamp.IsZero() {
					return false, fmt.Errorf("event %q has no lastTimestamp or firstTimestamp", e.Message)
				}
				return true, nil
			}
		}
		return false, nil
	})
	eventually(t, "the pinned pod's successor Running", 2*time.Minute, func(ctx context.Context) (bool, error) {
		for _, p := range pods(t, "leave-pinned") {
			if p.UID != old.UID && p.Status.Phase == corev1.PodRunning {
				if p.Spec.NodeName != waiting {
					return false, fmt.Errorf("the successor runs on %s, not on node %s that was up for it", p.Spec.NodeName, waiting)
				}
				return true, nil
			}
		}
		return false, nil
	})
}

// TestAPDBLimitedDrainLeavesNoPodWaitingForALaunch deletes the NodeClaims of ten pods whose PDB
// lets one go at a time. Their machines are launched when the nodes are marked, and the drains
// wait for them: every successor pod is created after the node it lands on was Ready — no evicted
// pod waits for a launch.
func TestAPDBLimitedDrainLeavesNoPodWaitingForALaunch(t *testing.T) {
	pool(t, "e2e-leave-pdb", nil, nil)
	deployment(t, "leave-pdb", "e2e-leave-pdb", 10, "1", "1Gi", nil)
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "leave-pdb", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "leave-pdb"}}}}
	if err := s.Client.Create(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), pdb) })
	eventually(t, "leave-pdb Running", 2*time.Minute, running(t, "leave-pdb", 10))
	before := map[string]bool{}
	var deleted, nodes []string
	for _, nc := range claims(t, "e2e-leave-pdb") {
		if err := s.Client.Delete(t.Context(), &nc); err != nil {
			t.Fatal(err)
		}
		deleted, nodes = append(deleted, nc.Name), append(nodes, nc.Status.NodeName)
	}
	for _, p := range pods(t, "leave-pdb") {
		before[string(p.UID)] = true
	}
	eventually(t, "the drained nodes gone", 5*time.Minute, gone(nodes, deleted))
	eventually(t, "leave-pdb Running again", 2*time.Minute, running(t, "leave-pdb", 10))
	for _, p := range pods(t, "leave-pdb") {
		if before[string(p.UID)] {
			continue
		}
		if slices.Contains(nodes, p.Spec.NodeName) {
			t.Errorf("successor %s runs on drained node %s", p.Name, p.Spec.NodeName)
			continue
		}
		n := &corev1.Node{}
		if err := s.Client.Get(t.Context(), client.ObjectKey{Name: p.Spec.NodeName}, n); err != nil {
			t.Fatal(err)
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady && c.LastTransitionTime.After(p.CreationTimestamp.Time) {
				t.Errorf("successor %s was created at %s, before its node %s was Ready (%s): it waited for a launch",
					p.Name, p.CreationTimestamp.UTC().Format(time.RFC3339), n.Name, c.LastTransitionTime.UTC().Format(time.RFC3339))
			}
		}
	}
}
