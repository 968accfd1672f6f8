package autoscaling

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// TestProtectedPodsHoldTheDrainUntilTheGracePeriod deletes a NodeClaim whose node runs a pod
// guarded by a PodDisruptionBudget (maxUnavailable 0, its status kept by the real
// kube-controller-manager) and a do-not-disrupt pod: evictions are refused and reported, and the
// node goes only once the terminationGracePeriod forces the pods out.
func TestProtectedPodsHoldTheDrainUntilTheGracePeriod(t *testing.T) {
	pool(t, "e2e-drain", nil, func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.TerminationGracePeriod = &metav1.Duration{Duration: 30 * time.Second}
	})
	deployment(t, "guarded", "e2e-drain", 1, "1", "1Gi", nil)
	deployment(t, "pinned", "e2e-drain", 1, "1", "1Gi", nil)
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "guarded"}}}}
	if err := s.Client.Create(t.Context(), pdb); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), pdb) })
	eventually(t, "guarded Running", 2*time.Minute, running(t, "guarded", 1))
	eventually(t, "pinned Running", 2*time.Minute, running(t, "pinned", 1))
	// The do-not-disrupt annotation goes on the running pod, as a job would set it.
	pinned := pods(t, "pinned")[0]
	orig := pinned.DeepCopy()
	pinned.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
	if err := s.Client.Patch(t.Context(), &pinned, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the PDB observed by the disruption controller", time.Minute, func(ctx context.Context) (bool, error) {
		cur := &policyv1.PodDisruptionBudget{}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(pdb), cur); err != nil {
			return false, err
		}
		return cur.Status.ObservedGeneration == cur.Generation && cur.Status.CurrentHealthy == 1, nil
	})

	nodes := map[string]bool{pods(t, "guarded")[0].Spec.NodeName: true, pinned.Spec.NodeName: true}
	var deleted []string
	for _, nc := range claims(t, "e2e-drain") {
		if err := s.Client.Delete(t.Context(), &nc); err != nil {
			t.Fatal(err)
		}
		deleted = append(deleted, nc.Name)
	}
	// Both refusals are reported while the grace period runs.
	eventually(t, "evictions refused and reported", time.Minute, func(ctx context.Context) (bool, error) {
		ev := &corev1.EventList{}
		if err := s.Client.List(ctx, ev, client.InNamespace("default")); err != nil {
			return false, err
		}
		var pdbBlocked, annotated bool
		for _, e := range ev.Items {
			if e.Reason != "FailedDraining" {
				continue
			}
			pdbBlocked = pdbBlocked || strings.HasPrefix(e.InvolvedObject.Name, "guarded-") && strings.Contains(e.Message, "PodDisruptionBudget")
			annotated = annotated || strings.HasPrefix(e.InvolvedObject.Name, "pinned-") && strings.Contains(e.Message, karpv1.DoNotDisruptAnnotationKey)
		}
		return pdbBlocked && annotated, nil
	})
	// Then the grace period forces them out and the nodes and their claims go. (The deployments
	// replace their pods, which may bring new claims: only the deleted ones are awaited.)
	eventually(t, "the nodes gone after the grace period", 2*time.Minute, gone(slices.Collect(maps.Keys(nodes)), deleted))
}

// gone holds once the nodes and NodeClaims named are all deleted.
func gone(nodes, claims []string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		for _, name := range nodes {
			if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, &corev1.Node{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		for _, name := range claims {
			if err := s.Client.Get(ctx, client.ObjectKey{Name: name}, &karpv1.NodeClaim{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	}
}
