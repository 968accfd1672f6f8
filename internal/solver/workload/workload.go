// Package workload generates the solver's benchmark inputs with fixed seeds: Karpenter's
// "diverse pods" scheduling benchmark (400 fake instance types, five kinds of pods), the same pods
// with preferences, and realistic mixes on the embedded EC2 catalog. Benchmarks, property tests
// and what-if runs share it.
package workload

import (
	"fmt"
	"math/rand/v2"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
	"capstan.dev/capstan/internal/solver"
)

// FakeInstanceTypes returns n types fake-it-0…n-1: type i has i+1 CPU, 2(i+1) GiB and 10(i+1)
// pods, amd64/linux, spot in zones 1–2 and on-demand in zones 1–3, every offering priced
// 0.1 × CPUs + 0.1 × GiB, with 100m CPU and 10Mi memory of overhead.
func FakeInstanceTypes(n int) []*cloudprovider.InstanceType {
	out := make([]*cloudprovider.InstanceType, 0, n)
	for i := range n {
		cpu := int64(i + 1)
		memGi := 2 * cpu
		out = append(out, FakeInstanceType(fmt.Sprintf("fake-it-%d", i), cpu, memGi, 10*cpu, karpv1.ArchitectureAmd64,
			0.1*float64(cpu)+0.1*float64(memGi)))
	}
	return out
}

// FakeInstanceType is a linux type of Karpenter's fake cloud provider's kind: cpu, memGi GiB and
// pods, the architecture, spot in test-zone-1 and -2 and on-demand in test-zone-1 to -3, every
// offering at price, with 100m CPU and 10Mi memory of overhead.
func FakeInstanceType(name string, cpu, memGi, pods int64, arch string, price float64) *cloudprovider.InstanceType {
	var offerings []cloudprovider.Offering
	for z := 1; z <= 3; z++ {
		zone := fmt.Sprintf("test-zone-%d", z)
		if z <= 2 {
			offerings = append(offerings, cloudprovider.Offering{Zone: zone, CapacityType: karpv1.CapacityTypeSpot, Price: price, Available: true})
		}
		offerings = append(offerings, cloudprovider.Offering{Zone: zone, CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true})
	}
	return cloudprovider.NewInstanceType(name,
		map[string]string{karpv1.ArchLabelKey: arch, karpv1.OSLabelKey: karpv1.OSLinux},
		corev1.ResourceList{
			corev1.ResourceCPU:    *resource.NewQuantity(cpu, resource.DecimalSI),
			corev1.ResourceMemory: *resource.NewQuantity(memGi<<30, resource.BinarySI),
			corev1.ResourcePods:   *resource.NewQuantity(pods, resource.DecimalSI),
		},
		corev1.ResourceList{
			corev1.ResourceCPU:    resource.MustParse("100m"),
			corev1.ResourceMemory: resource.MustParse("10Mi"),
		},
		offerings)
}

// Pod makes a pod with requests.
func Pod(name string, cpu, mem string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(name), Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem),
			}},
		}}},
	}
}

var (
	cpus     = []string{"100m", "250m", "500m", "1000m", "1500m"}
	mems     = []string{"100Mi", "256Mi", "512Mi", "1024Mi", "2048Mi", "4096Mi"}
	letters  = []string{"a", "b", "c", "d", "e", "f", "g"}
	zoneKey  = corev1.LabelTopologyZone
	hostKey  = corev1.LabelHostname
	selector = func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
)

// DiversePods returns n pods as Karpenter's scheduling benchmark makes them: n/5 each of generic,
// zone spread, hostname spread, zone pod affinity and hostname anti-affinity, the rest generic.
func DiversePods(n int, seed uint64) []*corev1.Pod {
	r := rand.New(rand.NewPCG(seed, seed))
	pods := make([]*corev1.Pod, 0, n)
	mk := func() *corev1.Pod {
		p := Pod(fmt.Sprintf("pod-%d", len(pods)), cpus[r.IntN(len(cpus))], mems[r.IntN(len(mems))],
			map[string]string{"my-label": letters[r.IntN(len(letters))]})
		return p
	}
	spread := func(key string) *corev1.Pod {
		p := mk()
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: key, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: selector("my-label", letters[r.IntN(len(letters))]),
		}}
		return p
	}
	fifth := n / 5
	for range fifth {
		pods = append(pods, mk())
	}
	for range fifth {
		pods = append(pods, spread(zoneKey))
	}
	for range fifth {
		pods = append(pods, spread(hostKey))
	}
	for range fifth {
		p := mk()
		v := letters[r.IntN(len(letters))]
		p.Labels["my-affinity"] = v
		p.Spec.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: zoneKey, LabelSelector: selector("my-affinity", v),
			}},
		}}
		pods = append(pods, p)
	}
	for range fifth {
		p := mk()
		p.Labels["app"] = "nginx"
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				TopologyKey: hostKey, LabelSelector: selector("app", "nginx"),
			}},
		}}
		pods = append(pods, p)
	}
	for len(pods) < n {
		pods = append(pods, mk())
	}
	return pods
}

// PreferencePods returns n pods labelled app=nginx that prefer zone test-zone-1 (weight 1) and
// prefer anti-affinity to each other on zone (weight 10) and hostname (weight 1).
func PreferencePods(n int, seed uint64) []*corev1.Pod {
	r := rand.New(rand.NewPCG(seed, seed))
	pods := make([]*corev1.Pod, 0, n)
	for i := range n {
		p := Pod(fmt.Sprintf("pref-%d", i), cpus[r.IntN(len(cpus))], mems[r.IntN(len(mems))], map[string]string{"app": "nginx"})
		term := func(key string) corev1.PodAffinityTerm {
			return corev1.PodAffinityTerm{TopologyKey: key, LabelSelector: selector("app", "nginx")}
		}
		p.Spec.Affinity = &corev1.Affinity{
			NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
				Weight: 1,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"test-zone-1"},
				}}},
			}}},
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 10, PodAffinityTerm: term(zoneKey)},
				{Weight: 1, PodAffinityTerm: term(hostKey)},
			}},
		}
		pods = append(pods, p)
	}
	return pods
}

// UnlimitedPool is a NodePool without requirements or limits over the given types.
func UnlimitedPool(name string, its []*cloudprovider.InstanceType) solver.NodePool {
	return solver.NodePool{Name: name, InstanceTypes: its}
}

func oneQuantity() *resource.Quantity { return resource.NewQuantity(1, resource.DecimalSI) }

// HasHostnameConstraint reports whether a pod has a hostname topology spread or pod
// (anti-)affinity term.
func HasHostnameConstraint(p *corev1.Pod) bool {
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.TopologyKey == hostKey {
			return true
		}
	}
	if a := p.Spec.Affinity; a != nil {
		if a.PodAffinity != nil {
			for _, t := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if t.TopologyKey == hostKey {
					return true
				}
			}
		}
		if a.PodAntiAffinity != nil {
			for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				if t.TopologyKey == hostKey {
					return true
				}
			}
		}
	}
	return false
}

// WellKnownLabels are the label keys the instance types define, as a cloud provider declares its
// own (solver.Input.WellKnownLabels): the provisioner passes the provider's list, so a solve does
// not derive it from the catalog each time.
func WellKnownLabels(its []*cloudprovider.InstanceType) []string {
	seen := map[string]bool{}
	var out []string
	for _, it := range its {
		it.Requirements.Each(func(r requirements.Requirement) {
			if !seen[r.Key] {
				seen[r.Key] = true
				out = append(out, r.Key)
			}
		})
	}
	slices.Sort(out)
	return out
}
