package solver_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// The default pool of `make run` (amd64, spot and on-demand, the whole catalog) under
// `limits: {cpu: "16"}`, and 25 pods of 1.5 CPU: the cheapest machines per pod are 2-vCPU ones,
// one pod each, and eight of them spend the limit on 8 pods. Provisioning (FillLimits) places the
// most pods the limit allows: 10, five to an 8-vCPU machine.
func TestABindingLimitRunsTheMostPodsItAllows(t *testing.T) {
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	its, err := catalog.InstanceTypes(entries, catalog.Options{Zones: []string{"zone-a", "zone-b", "zone-c"}})
	if err != nil {
		t.Fatal(err)
	}
	reqs, err := requirements.FromNodeSelector([]corev1.NodeSelectorRequirement{
		{Key: corev1.LabelArchStable, Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}},
		{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}}})
	if err != nil {
		t.Fatal(err)
	}
	pool := solver.NodePool{Name: "default", InstanceTypes: its, Requirements: reqs,
		Remaining: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16")}}
	for _, tc := range []struct {
		fill bool
		want int
	}{{false, 8}, {true, 10}} {
		r := solve(t, solver.Input{Pods: pods(25, "w", "1500m", "256Mi", nil), NodePools: []solver.NodePool{pool}}, solver.Options{FillLimits: tc.fill})
		placed, cpu := 0, int64(0)
		for _, nc := range r.NodeClaims {
			placed += len(nc.Pods)
			largest := int64(0)
			for _, it := range nc.InstanceTypes {
				largest = max(largest, it.Capacity.Cpu().MilliValue())
			}
			cpu += largest
		}
		if placed != tc.want || placed+len(r.Unschedulable) != 25 {
			t.Errorf("FillLimits %v: %d pods placed, %d refused; want %d placed", tc.fill, placed, len(r.Unschedulable), tc.want)
		}
		if cpu > 16000 {
			t.Errorf("FillLimits %v: the claims may launch with %dm CPU, past the 16-CPU limit", tc.fill, cpu)
		}
	}
}
