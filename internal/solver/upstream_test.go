package solver_test

// Karpenter v1.15's own scheduling scenarios (pkg/controllers/provisioning/scheduling in its
// module), translated exactly: the instance types of its fake cloud provider, rebuilt here from
// their published facts (names, resources, 100m/10Mi reserved, offerings in test-zone-1..3, price
// 0.1 per CPU plus 0.1 per GB of memory), and each spec's pool and pods.

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/solver/workload"
)

// upstreamType is one of the fake cloud provider's instance types: its price is 0.1 per CPU plus
// 0.1 per GB (10^9 bytes) of memory.
func upstreamType(name string, cpu, memGi, pods int64, arch string) *cloudprovider.InstanceType {
	return workload.FakeInstanceType(name, cpu, memGi, pods, arch, 0.1*float64(cpu)+0.1*float64(memGi<<30)/1e9)
}

// upstreamTypes are the fake cloud provider's default instance types (GPU types left out: no
// scenario here asks for a GPU).
func upstreamTypes() []*cloudprovider.InstanceType {
	return []*cloudprovider.InstanceType{
		upstreamType("default-instance-type", 4, 4, 5, karpv1.ArchitectureAmd64),
		upstreamType("small-instance-type", 2, 2, 5, karpv1.ArchitectureAmd64),
		upstreamType("arm-instance-type", 16, 128, 5, karpv1.ArchitectureArm64),
		upstreamType("single-pod-instance-type", 4, 4, 1, karpv1.ArchitectureAmd64),
	}
}

func upstreamPod(name string, selector map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name)},
		Spec: corev1.PodSpec{NodeSelector: selector, Containers: []corev1.Container{{Name: "c"}}}}
}

// "should allow two nodes to be created when two pods with matching affinities have incompatible
// selectors": two pods labelled security=s1, each with a required zone affinity to security=s1
// pods, one requiring test-zone-2, the other test-zone-3. Karpenter buys a machine in each zone.
// The kube-scheduler binds whichever it tries first (no pod matches yet, and the pod matches its
// own term), and then never the other: its affinity needs the first one's zone, its selector
// another. Capstan buys the one machine that can be used and says why the other pod waits — a
// deliberate difference (docs/conformance.md).
func TestUpstreamMatchingAffinitiesWithIncompatibleSelectorsBuyOneUsableMachine(t *testing.T) {
	pool := poolOf(upstreamTypes())
	labels := map[string]string{"security": "s1"}
	pod := func(name, zone string) *corev1.Pod {
		p := upstreamPod(name, nil)
		p.Labels = labels
		p.Spec.Affinity = &corev1.Affinity{
			PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelTopologyZone}}},
			NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
					{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}}}}}},
		}
		return p
	}
	r := solve(t, solver.Input{Pods: []*corev1.Pod{pod("pod1", "test-zone-2"), pod("pod2", "test-zone-3")},
		NodePools: []solver.NodePool{pool}}, solver.Options{})
	if len(r.NodeClaims) != 1 || len(r.Unschedulable) != 1 {
		t.Fatalf("%d claims and %d pods unschedulable, want one machine and one pod told why", len(r.NodeClaims), len(r.Unschedulable))
	}
	if reason := r.Unschedulable[0].Reason; !strings.Contains(reason, "topology") {
		t.Errorf("reason %q, want the pod's affinity named", reason)
	}
}

// "schedule should fail if minimum number of InstanceTypes is not met as per the minValues in the
// requirement after truncation": two arm64 spot types (1 CPU at 0.52 $/h, 4 CPU at 1.00), a pool
// requiring both with minValues 2, the candidate list cut to 1, two pods of 0.9 CPU and 0.9 GiB.
// Karpenter fails both pods; Capstan keeps a claim's list past the cut as far as minValues needs,
// so both pods get machines whose claims list the two types — a deliberate difference
// (docs/conformance.md).
func TestUpstreamMinValuesPastTheCutKeepsTheTypesItNeeds(t *testing.T) {
	typ := func(name string, cpu int64, price float64) *cloudprovider.InstanceType {
		it := workload.FakeInstanceType(name, cpu, cpu, 5, karpv1.ArchitectureArm64, price)
		return cloudprovider.NewInstanceType(name, map[string]string{karpv1.ArchLabelKey: karpv1.ArchitectureArm64, karpv1.OSLabelKey: karpv1.OSLinux},
			it.Capacity, it.Overhead, []cloudprovider.Offering{{Zone: "test-zone-1-spot", CapacityType: karpv1.CapacityTypeSpot, Price: price, Available: true}})
	}
	pool := poolOf([]*cloudprovider.InstanceType{typ("instance-type-1", 1, 0.52), typ("instance-type-2", 4, 1.0)})
	req := requirements.MustNew(karpv1.InstanceTypeLabelKey, requirements.In, "instance-type-1", "instance-type-2")
	req.MinValues = 2
	pool.Requirements.Add(req)
	var pods []*corev1.Pod
	for _, name := range []string{"pod1", "pod2"} {
		p := upstreamPod(name, nil)
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0.9"), corev1.ResourceMemory: resource.MustParse("0.9Gi")}
		pods = append(pods, p)
	}
	r := solve(t, solver.Input{Pods: pods, NodePools: []solver.NodePool{pool}}, solver.Options{MaxInstanceTypes: 1})
	wantAllPlaced(t, r)
	for _, nc := range r.NodeClaims {
		if key, want, have := nc.MinValuesShortfall(); key != "" {
			t.Errorf("a claim has %d value(s) of %s, its minValues %d", have, key, want)
		}
	}
}

// "should support pod affinity with zone topology (unconstrained target)": a target pod labelled
// security=s2 with no zone constraint and ten pods with a required zone affinity to it, pending
// together. Karpenter launches the target's machine first and leaves the ten unschedulable until
// its zone is known, then places them in it at the next pass; Capstan fixes the target's claim's
// zone when it plans it and places the ten in that zone in the same pass — the same end, one
// pass sooner (a deliberate difference, docs/conformance.md).
func TestUpstreamZoneAffinityToAnUnconstrainedTargetIsOneZoneInOnePass(t *testing.T) {
	pool := poolOf(upstreamTypes())
	labels := map[string]string{"security": "s2"}
	target := upstreamPod("target", nil)
	target.Labels = labels
	pods := []*corev1.Pod{target}
	for i := range 10 {
		p := upstreamPod(fmt.Sprintf("aff-%d", i), nil)
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelTopologyZone}}}}
		pods = append(pods, p)
	}
	r := solve(t, solver.Input{Pods: pods, NodePools: []solver.NodePool{pool}}, solver.Options{})
	wantAllPlaced(t, r)
	zones := map[string]int{}
	for _, nc := range r.NodeClaims {
		zones[zoneOf(nc)] += len(nc.Pods)
	}
	if len(zones) != 1 || zones[""] != 0 {
		t.Fatalf("pods per zone %v, want all eleven in one decided zone", zones)
	}
}

// "should support pod anti-affinity with a zone topology": pods labelled security=s2 that each
// avoid a zone holding another. Karpenter, committing a claim's zone only at launch, places one
// per pass; Capstan fixes each claim's zone when it plans it and places three in one pass, one
// per zone, and a fourth nowhere — the spec's end state, sooner (docs/conformance.md).
func TestUpstreamZoneAntiAffinityPlacesOnePerZoneInOnePass(t *testing.T) {
	pool := poolOf(upstreamTypes())
	labels := map[string]string{"security": "s2"}
	var pods []*corev1.Pod
	for i := range 4 {
		p := upstreamPod(fmt.Sprintf("anti-%d", i), nil)
		p.Labels = labels
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelTopologyZone}}}}
		pods = append(pods, p)
	}
	r := solve(t, solver.Input{Pods: pods, NodePools: []solver.NodePool{pool}}, solver.Options{})
	zones := map[string]int{}
	for _, nc := range r.NodeClaims {
		zones[zoneOf(nc)] += len(nc.Pods)
	}
	if len(zones) != 3 || zones["test-zone-1"] != 1 || zones["test-zone-2"] != 1 || zones["test-zone-3"] != 1 || len(r.Unschedulable) != 1 {
		t.Fatalf("pods per zone %v and %d unschedulable, want one in each of the three zones and the fourth told why", zones, len(r.Unschedulable))
	}
}

// "should not violate pod anti-affinity on zone (other schedules first)" and "(Schrödinger)": a
// pod labelled security=s2 and a pod that avoids the zone of such pods (one of them asking 2
// CPU), pending together. Karpenter places the first and leaves the second for a later pass,
// once the first's zone is committed; Capstan places both in one pass, in two zones
// (docs/conformance.md).
func TestUpstreamZoneAntiAffinityAcrossAPendingPairIsTwoZonesInOnePass(t *testing.T) {
	labels := map[string]string{"security": "s2"}
	anti := &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
		LabelSelector: &metav1.LabelSelector{MatchLabels: labels}, TopologyKey: corev1.LabelTopologyZone}}}}
	twoCPU := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
	for _, tc := range []struct {
		name            string
		labelledCPU     bool // the labelled pod asks 2 CPU ("other schedules first"), else the avoiding one ("Schrödinger")
		labelled, avoid string
	}{
		{"other schedules first", true, "pod", "affPod"},
		{"Schrödinger", false, "affPod", "zoneAnywherePod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			labelled, avoiding := upstreamPod(tc.labelled, nil), upstreamPod(tc.avoid, nil)
			labelled.Labels = labels
			avoiding.Spec.Affinity = anti
			if tc.labelledCPU {
				labelled.Spec.Containers[0].Resources.Requests = twoCPU
			} else {
				avoiding.Spec.Containers[0].Resources.Requests = twoCPU
			}
			r := solve(t, solver.Input{Pods: []*corev1.Pod{labelled, avoiding}, NodePools: []solver.NodePool{poolOf(upstreamTypes())}}, solver.Options{})
			wantAllPlaced(t, r)
			zone := map[string]string{}
			for _, nc := range r.NodeClaims {
				for _, p := range nc.Pods {
					zone[p.Name] = zoneOf(nc)
				}
			}
			if zone[tc.labelled] == "" || zone[tc.avoid] == "" || zone[tc.labelled] == zone[tc.avoid] {
				t.Fatalf("zones %v, want the two pods in two decided zones", zone)
			}
		})
	}
}
