package awsfake

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/catalog"
)

// The fake kubelet's reservations are anchored to published figures, not to the provider's
// formulas: for every type of the embedded catalog, a Node of the default configuration (AL2023,
// a 20 GiB root volume, no kubelet settings) has the catalog's allocatable CPU, memory, pods and
// ephemeral storage — numbers computed elsewhere from EC2's data. The end-to-end suites compare
// the provider's expected allocatable with these Nodes, so a wrong formula in either shows.
func TestKubeletAllocatableMatchesTheCatalog(t *testing.T) {
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	k := &Kubelet{}
	checked, wrong := 0, 0
	for _, e := range entries {
		it, ok := fromCatalog(e)
		if !ok || e.Labels[corev1.LabelOSStable] != "linux" {
			continue
		}
		_, alloc, err := k.resources(it, Instance{}, "al2023", nil)
		if err != nil {
			t.Fatalf("%s: %v", e.Name, err)
		}
		checked++
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
			want, err := resource.ParseQuantity(e.Allocatable[string(name)])
			if err != nil {
				t.Fatalf("%s: catalog allocatable %s %q: %v", e.Name, name, e.Allocatable[string(name)], err)
			}
			if got := alloc[name]; got.Cmp(want) != 0 {
				wrong++
				if wrong <= 20 {
					t.Errorf("%s: allocatable %s %s, the catalog says %s", e.Name, name, got.String(), want.String())
				}
			}
		}
	}
	if checked < 1000 {
		t.Errorf("checked %d types, want the catalog's (over 1,000)", checked)
	}
	if wrong > 20 {
		t.Errorf("and %d more differences", wrong-20)
	}
}

// The fake kubelet's kube-reserved CPU is the EKS AMIs' documented rule — 6% of the first core,
// 1% of the second, 0.5% of the third and fourth, 0.25% of every further one — in worked values.
func TestKubeReservedCPUWorkedValues(t *testing.T) {
	for vcpus, want := range map[int64]int64{1: 60, 2: 70, 3: 75, 4: 80, 8: 90, 16: 110, 32: 150, 48: 190, 64: 230, 96: 310, 192: 550, 448: 1190} {
		if got := nodeadmKubeReservedCPU(vcpus); got != want {
			t.Errorf("%d vCPUs: %dm reserved, want %dm", vcpus, got, want)
		}
	}
}
