package disruptionplan_test

// Karpenter v1.15's own consolidation scenarios (pkg/controllers/disruption/consolidation_test.go
// in its module), translated exactly: the instance types of its fake cloud provider's assorted
// list (one offering each), each spec's prices, pool, node and pod.

import (
	"fmt"
	"slices"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
)

// assortedSpot is the first n spot types of the fake cloud provider's assorted list, in its order
// (CPUs, then memory, zone, capacity type, OS, architecture), each with its one offering: a spot
// offering in one zone. Prices are set by the caller.
func assortedSpot(n int) []*cloudprovider.InstanceType {
	var out []*cloudprovider.InstanceType
	for _, cpu := range []int64{1, 2, 4, 8, 16, 32, 64} {
		for _, mem := range []int64{1, 2, 4, 8, 16, 32, 64, 128} {
			for _, zone := range []string{"test-zone-1", "test-zone-2", "test-zone-3"} {
				for _, os := range []string{karpv1.OSLinux, "windows"} {
					for _, arch := range []string{karpv1.ArchitectureAmd64, karpv1.ArchitectureArm64} {
						if len(out) == n {
							return out
						}
						name := fmt.Sprintf("%d-cpu-%d-mem-%s-%s-%s-%s", cpu, mem, arch, os, zone, karpv1.CapacityTypeSpot)
						out = append(out, cloudprovider.NewInstanceType(name,
							map[string]string{karpv1.ArchLabelKey: arch, karpv1.OSLabelKey: os},
							corev1.ResourceList{
								corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
								corev1.ResourceMemory: *resource.NewQuantity(mem<<30, resource.BinarySI),
								corev1.ResourcePods:   *resource.NewQuantity(5, resource.DecimalSI),
							}, nil,
							[]cloudprovider.Offering{{Zone: zone, CapacityType: karpv1.CapacityTypeSpot, Available: true}}))
					}
				}
			}
		}
	}
	return out
}

// upstreamSpotToSpot sets up the spec's cluster: 18 spot types priced 1.0, 1.1, … 2.7, the 17th
// repriced to 0.001 (outside the first 15); a pool with test.NodePool's 2000-CPU limit whose
// instance-type requirement has minValues (none when 0);
// one spot node of the dearest type with one pod (no requests) of a ReplicaSet; and decides with
// SpotToSpotConsolidation on. It returns the replacement's type names and the 16 cheapest names.
func upstreamSpotToSpot(t *testing.T, minValues int) (got, cheapest []string, cheapestType, dearest string) {
	t.Helper()
	its := assortedSpot(18)
	for i, it := range its {
		it.Offerings[0].Price = 1.00 + float64(i)*0.1
	}
	its[16].Offerings[0].Price = 0.001
	c := &cluster{t: t, its: its, snap: &disruptionplan.Snapshot{Now: t0}}
	c.pool("default", func(np *karpv1.NodePool) {
		// test.NodePool's limit, 2000 CPU, of which the node holds 1.
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2000")}
		if minValues > 0 {
			np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpExists, MinValues: &minValues}}
		}
	})
	c.snap.NodePools[0].Solver.Remaining = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1999")}
	byPrice := slices.Clone(its)
	sort.SliceStable(byPrice, func(i, j int) bool { return byPrice[i].Offerings[0].Price < byPrice[j].Offerings[0].Price })
	for _, it := range byPrice[:16] {
		cheapest = append(cheapest, it.Name)
	}
	old := its[17]
	labels := map[string]string{
		karpv1.NodePoolLabelKey: "default", karpv1.InstanceTypeLabelKey: old.Name, karpv1.ZoneLabelKey: old.Offerings[0].Zone,
		karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot, karpv1.ArchLabelKey: karpv1.ArchitectureArm64, karpv1.OSLabelKey: karpv1.OSLinux,
		corev1.LabelHostname: "spot",
	}
	created := metav1.NewTime(t0.Add(-time.Hour))
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "spot", Labels: labels, CreationTimestamp: created}}
	nc.Status.ProviderID, nc.Status.NodeName = "fake://spot", "spot"
	nc.Status.Capacity = old.Capacity
	nc.Status.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("32"), corev1.ResourcePods: resource.MustParse("5")}
	for _, ct := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeConsolidatable} {
		nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: ct, Status: metav1.ConditionTrue, Reason: ct, LastTransitionTime: created})
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "spot", Labels: labels, CreationTimestamp: created},
		Spec:   corev1.NodeSpec{ProviderID: nc.Status.ProviderID},
		Status: corev1.NodeStatus{Capacity: old.Capacity, Allocatable: nc.Status.Allocatable, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default", UID: types.UID("p"), CreationTimestamp: created,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: new(true)}}},
		Spec:   corev1.PodSpec{NodeName: "spot", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	c.snap.Nodes = append(c.snap.Nodes, &disruptionplan.Node{NodeClaim: nc, Node: n, Pods: []*corev1.Pod{p}})
	d := c.decide(disruptionplan.Options{SpotToSpotConsolidation: true})
	if d.Command == nil || len(d.Command.Replacements) != 1 {
		_, why := explanation(d, "spot")
		t.Fatalf("command %+v (the node: %q); want the node replaced by one cheaper spot machine", d.Command, why)
	}
	for _, it := range d.Command.Replacements[0].InstanceTypes {
		got = append(got, it.Name)
	}
	return got, cheapest, its[16].Name, old.Name
}

// "spot to spot consolidation should consider the max of default and minimum number of
// instanceTypeOptions from minValues in requirement for truncation if minimum number of
// instanceTypeOptions from minValues in requirement is greater than 15": minValues 16 — the
// replacement lists the 16 cheapest types, the one repriced below the rest among them.
func TestUpstreamSpotToSpotKeepsTheCheapestMinValuesTypes(t *testing.T) {
	got, cheapest, cheapestType, dearest := upstreamSpotToSpot(t, 16)
	if len(got) != 16 || slices.Contains(got, dearest) || !slices.Contains(got, cheapestType) {
		t.Fatalf("replacement types %v: want 16, with %s and without %s", got, cheapestType, dearest)
	}
	for _, name := range cheapest {
		if !slices.Contains(got, name) {
			t.Errorf("replacement types %v lack %s, one of the 16 cheapest", got, name)
		}
	}
}

// "… for truncation if minimum number of instanceTypeOptions from minValues in requirement is
// less than 15": minValues 10 — the replacement lists the 15 cheapest types.
func TestUpstreamSpotToSpotKeepsTheCheapestFifteenTypes(t *testing.T) {
	got, cheapest, cheapestType, dearest := upstreamSpotToSpot(t, 10)
	if len(got) != 15 || slices.Contains(got, dearest) || !slices.Contains(got, cheapestType) {
		t.Fatalf("replacement types %v: want 15, with %s and without %s", got, cheapestType, dearest)
	}
	for _, name := range cheapest[:15] {
		if !slices.Contains(got, name) {
			t.Errorf("replacement types %v lack %s, one of the 15 cheapest", got, name)
		}
	}
}

// "spot to spot consolidation should order the instance types by price before enforcing minimum
// flexibility": no minValues — the replacement lists the 15 cheapest types. In a pool with
// limits a claim keeps the types near its target in price and those no larger, so the cheaper
// types are counted, not only the one repriced to 0.001 (which alone is within 1.5x of itself).
func TestUpstreamSpotToSpotOrdersByPriceBeforeCountingFifteen(t *testing.T) {
	got, cheapest, cheapestType, dearest := upstreamSpotToSpot(t, 0)
	if len(got) != 15 || slices.Contains(got, dearest) || !slices.Contains(got, cheapestType) {
		t.Fatalf("replacement types %v: want 15, with %s and without %s", got, cheapestType, dearest)
	}
	for _, name := range cheapest[:15] {
		if !slices.Contains(got, name) {
			t.Errorf("replacement types %v lack %s, one of the 15 cheapest", got, name)
		}
	}
}
