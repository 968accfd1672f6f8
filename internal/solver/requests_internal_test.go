package solver

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
)

// The plain-pod shortcut of podRequests gives what kube-scheduler's helper gives, on random pods
// with and without the features that disable it (init containers, overhead, statuses, resizes).
func TestPodRequestsMatchesTheHelper(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	q := func(unit string) resource.Quantity {
		return resource.MustParse(fmt.Sprintf("%d%s", 1+rng.IntN(4000), unit))
	}
	list := func() corev1.ResourceList {
		rl := corev1.ResourceList{}
		if rng.IntN(5) > 0 {
			rl[corev1.ResourceCPU] = q("m")
		}
		if rng.IntN(5) > 0 {
			rl[corev1.ResourceMemory] = q("Mi")
		}
		if rng.IntN(8) == 0 {
			rl["nvidia.com/gpu"] = resource.MustParse(fmt.Sprint(1 + rng.IntN(4)))
		}
		return rl
	}
	plain := 0
	for i := range 2000 {
		p := &corev1.Pod{}
		for j := range 1 + rng.IntN(3) {
			p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: fmt.Sprint("c", j), Resources: corev1.ResourceRequirements{Requests: list()}})
		}
		switch rng.IntN(6) {
		case 0:
			p.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: corev1.ResourceRequirements{Requests: list()}}}
		case 1:
			p.Spec.Overhead = list()
		case 2:
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c0", AllocatedResources: list(), Resources: &corev1.ResourceRequirements{Requests: list()}}}
		case 3:
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c0", Resources: &corev1.ResourceRequirements{Requests: list()}}}
		default:
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
		}
		if plainRequests(p) {
			plain++
		}
		want := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true})
		want[corev1.ResourcePods] = *resource.NewQuantity(1, resource.DecimalSI)
		got := podRequests(p)
		if len(got) != len(want) {
			t.Fatalf("pod %d: %v, helper %v", i, got, want)
		}
		for n, w := range want {
			if g := got[n]; g.Cmp(w) != 0 {
				t.Fatalf("pod %d: %s = %s, helper %s", i, n, g.String(), w.String())
			}
		}
	}
	if plain < 500 {
		t.Fatalf("only %d of 2000 pods took the shortcut", plain)
	}
}
