package solver

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// In a pool with limits, dissolving leftover claims keeps the books: what the pool has left plus
// what every claim reserves is the limit, before and after, and the reservations only shrink.
func TestDissolvingInALimitedPoolGivesReservationsBack(t *testing.T) {
	var its []*cloudprovider.InstanceType
	for i := range 64 {
		cpu := int64(i + 1)
		its = append(its, cloudprovider.NewInstanceType(fmt.Sprintf("t-%d", i),
			map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureAmd64, karpv1.OSLabelKey: karpv1.OSLinux},
			corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(cpu, resource.DecimalSI),
				corev1.ResourceMemory: *resource.NewQuantity(2*cpu<<30, resource.BinarySI),
				corev1.ResourcePods:   *resource.NewQuantity(10*cpu, resource.DecimalSI)},
			corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")},
			[]cloudprovider.Offering{{Zone: "z1", CapacityType: karpv1.CapacityTypeOnDemand, Price: 0.3 * float64(cpu), Available: true}}))
	}
	const limit = 100000
	dissolved := 0
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, seed))
		var pods []*corev1.Pod
		pod := func(name, cpu string, labels map[string]string) *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("512Mi")}}}}}}
		}
		// One machine per anchor, and pods of every size to fill them.
		for i := range 20 {
			p := pod(fmt.Sprintf("anchor-%d", i), "1", map[string]string{"app": "anchor"})
			p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "anchor"}}}}}}
			pods = append(pods, p)
		}
		cpus := []string{"100m", "250m", "500m", "1", "1500m"}
		for i := range 40 + r.IntN(60) {
			pods = append(pods, pod(fmt.Sprintf("fill-%d", i), cpus[r.IntN(len(cpus))], map[string]string{"app": "fill"}))
		}
		in := Input{Pods: pods, NodePools: []NodePool{{Name: "limited", InstanceTypes: its,
			Remaining: corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(limit, resource.DecimalSI)}}}}
		base := prepareShared(in, Options{MaxInstanceTypes: DefaultMaxInstanceTypes}, wellKnownLabels(in), podFactsOf(in))
		s := base.fork(balanceLast)
		s.prepare()
		s.run()
		p := s.pools[0]
		books := func() (int64, int) {
			sum, claims := p.remaining[rCPU], 0
			for _, tg := range s.targets {
				if tg.isClaim() && len(tg.pods) > 0 {
					sum += tg.reserved[rCPU]
					claims++
				}
			}
			return sum, claims
		}
		before, claimsBefore := books()
		reservedBefore := int64(limit*1000) - p.remaining[rCPU]
		s.dissolve()
		after, claimsAfter := books()
		if before != limit*1000 || after != limit*1000 {
			t.Fatalf("seed %d: left plus reserved is %d m before and %d m after dissolving, want the limit %d m", seed, before, after, limit*1000)
		}
		if reservedAfter := int64(limit*1000) - p.remaining[rCPU]; reservedAfter > reservedBefore {
			t.Fatalf("seed %d: claims reserve %d m after dissolving, %d m before", seed, reservedAfter, reservedBefore)
		}
		dissolved += claimsBefore - claimsAfter
	}
	if dissolved == 0 {
		t.Fatal("no claim was dissolved in any seed: the test exercises nothing")
	}
	t.Logf("%d claims dissolved over 40 seeds", dissolved)
}
