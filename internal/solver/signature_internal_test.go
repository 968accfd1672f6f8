package solver

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// sigPod is a pod using every field the signature reads; maps are filled in the given key order.
func sigPod(order []string) *corev1.Pod {
	labels, selector, match := map[string]string{}, map[string]string{}, map[string]string{}
	for _, k := range order {
		labels[k] = "v-" + k
		selector["node-"+k] = k
		match[k] = "m-" + k
	}
	secs := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: labels},
		Spec: corev1.PodSpec{
			NodeSelector: selector,
			Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					LabelSelector: &metav1.LabelSelector{MatchLabels: match}, TopologyKey: corev1.LabelHostname,
				}},
			}},
			Tolerations: []corev1.Toleration{{Key: "t", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &secs}},
			TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
				MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.DoNotSchedule,
				LabelSelector: &metav1.LabelSelector{MatchLabels: match},
			}},
			Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}}},
		},
	}
}

var sigRequests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")}

// Pods alike must share a class whatever order their maps were built in, and a difference in
// any field the solver reads must part them.
func TestPodSignatureTellsPodsApart(t *testing.T) {
	base := podSignature(sigPod([]string{"a", "b", "c", "d"}), sigRequests)
	for range 50 {
		if got := podSignature(sigPod([]string{"d", "b", "c", "a"}), sigRequests.DeepCopy()); got != base {
			t.Fatal("the same pod with maps built in another order got another signature")
		}
	}
	mutations := map[string]func(p *corev1.Pod, r corev1.ResourceList){
		"namespace":     func(p *corev1.Pod, _ corev1.ResourceList) { p.Namespace = "other" },
		"label value":   func(p *corev1.Pod, _ corev1.ResourceList) { p.Labels["a"] = "x" },
		"label split":   func(p *corev1.Pod, _ corev1.ResourceList) { delete(p.Labels, "a"); p.Labels["av"] = "-a" },
		"request":       func(_ *corev1.Pod, r corev1.ResourceList) { r[corev1.ResourceCPU] = resource.MustParse("251m") },
		"new resource":  func(_ *corev1.Pod, r corev1.ResourceList) { r["nvidia.com/gpu"] = resource.MustParse("1") },
		"node selector": func(p *corev1.Pod, _ corev1.ResourceList) { p.Spec.NodeSelector["node-a"] = "b" },
		"affinity": func(p *corev1.Pod, _ corev1.ResourceList) {
			p.Spec.Affinity.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey = corev1.LabelTopologyZone
		},
		"no affinity": func(p *corev1.Pod, _ corev1.ResourceList) { p.Spec.Affinity = nil },
		"empty affinity": func(p *corev1.Pod, _ corev1.ResourceList) {
			p.Spec.Affinity = &corev1.Affinity{}
		},
		"toleration seconds": func(p *corev1.Pod, _ corev1.ResourceList) {
			s := int64(31)
			p.Spec.Tolerations[0].TolerationSeconds = &s
		},
		"no toleration": func(p *corev1.Pod, _ corev1.ResourceList) { p.Spec.Tolerations = nil },
		"spread skew":   func(p *corev1.Pod, _ corev1.ResourceList) { p.Spec.TopologySpreadConstraints[0].MaxSkew = 2 },
		"host port":     func(p *corev1.Pod, _ corev1.ResourceList) { p.Spec.Containers[0].Ports[0].HostPort = 8081 },
		"host port protocol": func(p *corev1.Pod, _ corev1.ResourceList) {
			p.Spec.Containers[0].Ports[0].Protocol = corev1.ProtocolUDP
		},
	}
	seen := map[string]string{base: "base"}
	for name, mutate := range mutations {
		p, r := sigPod([]string{"a", "b", "c", "d"}), sigRequests.DeepCopy()
		mutate(p, r)
		sig := podSignature(p, r)
		if other, dup := seen[sig]; dup {
			t.Errorf("%s: same signature as %s", name, other)
		}
		seen[sig] = name
	}
}
