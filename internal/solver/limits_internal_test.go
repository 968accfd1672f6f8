package solver

import (
	"fmt"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// Why a claim of a pool with limits keeps only candidates priced near its target: the limit is
// hard at every moment, so each in-flight claim holds, against it, the capacity of the largest
// type it may launch as. Twenty one-per-node pods of 0.9 CPU each need twenty 1-CPU machines;
// keeping every valid type (up to 48 CPU) makes each claim hold 48 CPU of a 96-CPU limit, so two
// pods get machines; within 1.5x of the target's price, the same limit places all twenty.
func TestLimitedPoolsNarrowCandidatesSoBurstsAreNotThrottled(t *testing.T) {
	placed := func(spread float64) (int, int) {
		old := limitedPriceSpread
		limitedPriceSpread = spread
		defer func() { limitedPriceSpread = old }()
		var pods []*corev1.Pod
		for i := range 20 {
			pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "default", UID: types.UID(fmt.Sprint(i)), Labels: map[string]string{"app": "one-per-node"}},
				Spec: corev1.PodSpec{Affinity: onePerNode, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}})
		}
		np := NodePool{Name: "limited", InstanceTypes: linearTypes(48),
			Remaining: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("96")}}
		r := Solve(Input{Pods: pods, NodePools: []NodePool{np}}, Options{})
		// The limit holds whichever candidate each claim launches as.
		var worst int64
		for _, nc := range r.NodeClaims {
			worst += largestCPU(nc.InstanceTypes)
		}
		if worst > 96 {
			t.Fatalf("spread %v: the claims may launch %d CPU against a limit of 96", spread, worst)
		}
		n := 0
		for _, nc := range r.NodeClaims {
			n += len(nc.Pods)
		}
		return n, len(r.NodeClaims)
	}
	narrow, narrowClaims := placed(limitedPriceSpread)
	wide, wideClaims := placed(math.Inf(1))
	t.Logf("within 1.5x: %d pods on %d claims; every valid type: %d pods on %d claims", narrow, narrowClaims, wide, wideClaims)
	if narrow != 20 || wide > 2 {
		t.Fatalf("placed %d pods narrowed, %d with every valid type: want all 20 narrowed and at most 2 without", narrow, wide)
	}
}

// linearTypes are n on-demand types of 1..n CPU, 2 GiB per CPU, priced by size.
func linearTypes(n int) []*cloudprovider.InstanceType {
	var out []*cloudprovider.InstanceType
	for i := 1; i <= n; i++ {
		out = append(out, cloudprovider.NewInstanceType(fmt.Sprintf("linear-%d", i),
			map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux},
			corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(int64(i), resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(int64(2*i)<<30, resource.BinarySI), corev1.ResourcePods: *resource.NewQuantity(int64(10*i), resource.DecimalSI)},
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			[]cloudprovider.Offering{{Zone: "zone-a", CapacityType: karpv1.CapacityTypeOnDemand, Price: 0.05 * float64(i), Available: true}}))
	}
	return out
}

// onePerNode keeps pods labelled app=one-per-node on separate machines.
var onePerNode = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
	TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "one-per-node"}}}}}}

func largestCPU(its []*cloudprovider.InstanceType) int64 {
	var m int64
	for _, it := range its {
		m = max(m, it.Capacity.Cpu().Value())
	}
	return m
}
