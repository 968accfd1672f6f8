package planning

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func rl(kv ...string) corev1.ResourceList {
	out := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		out[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return out
}

func sameResources(t *testing.T, what string, got, want corev1.ResourceList) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %v, want %v", what, got, want)
		return
	}
	for k, q := range want {
		if g, ok := got[k]; !ok || g.Cmp(q) != 0 {
			t.Errorf("%s: %v, want %v", what, got, want)
			return
		}
	}
}

// The API server admits a container with its namespace's LimitRange defaults: what it leaves
// unset takes the default limit and request (a LimitRange with only `default` has, once stored,
// the same `defaultRequest`; the same rule fills in LimitRanges read from a recording), and a
// request still unset takes the limit. Karpenter's regression suite's DaemonSet specs are these
// cases: a template that sets only a memory limit, under `default` or `defaultRequest` of 2 CPU.
func TestWithLimitRangeDefaults(t *testing.T) {
	container := func(req, lim corev1.ResourceList) []corev1.Container {
		return []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}
	}
	lr := func(ns string, items ...corev1.LimitRangeItem) corev1.LimitRange {
		return corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: "lr", Namespace: ns}, Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	for _, tc := range []struct {
		name         string
		in           []corev1.Container
		lrs          []corev1.LimitRange
		wantRequests corev1.ResourceList
		wantLimits   corev1.ResourceList
	}{
		{"no LimitRange: a limit without a request is the request", container(nil, rl("memory", "1Gi")), nil, rl("memory", "1Gi"), rl("memory", "1Gi")},
		{"another namespace's LimitRange is not applied", container(rl("cpu", "1"), nil),
			[]corev1.LimitRange{lr("other", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, DefaultRequest: rl("cpu", "2", "memory", "1Gi")})},
			rl("cpu", "1"), nil},
		{"default only (Karpenter's LimitRange Default spec)", container(nil, rl("memory", "1Gi")),
			[]corev1.LimitRange{lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Default: rl("cpu", "2", "memory", "1Gi")})},
			rl("cpu", "2", "memory", "1Gi"), rl("cpu", "2", "memory", "1Gi")},
		{"defaultRequest only (Karpenter's LimitRange DefaultRequest spec)", container(nil, rl("memory", "1Gi")),
			[]corev1.LimitRange{lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, DefaultRequest: rl("cpu", "2", "memory", "1Gi")})},
			rl("cpu", "2", "memory", "1Gi"), rl("memory", "1Gi")},
		{"what the container sets stays", container(rl("cpu", "100m"), nil),
			[]corev1.LimitRange{lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, DefaultRequest: rl("cpu", "2", "memory", "128Mi")})},
			rl("cpu", "100m", "memory", "128Mi"), nil},
		{"min and max complete the defaults", container(nil, nil),
			[]corev1.LimitRange{lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, Max: rl("cpu", "4"), Min: rl("memory", "64Mi")})},
			rl("cpu", "4", "memory", "64Mi"), rl("cpu", "4")},
		{"Pod items set no container default", container(nil, nil),
			[]corev1.LimitRange{lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypePod, Max: rl("cpu", "4")})},
			nil, nil},
		{"the first LimitRange to set a resource wins", container(nil, nil),
			[]corev1.LimitRange{lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, DefaultRequest: rl("cpu", "1")}),
				lr("default", corev1.LimitRangeItem{Type: corev1.LimitTypeContainer, DefaultRequest: rl("cpu", "3", "memory", "1Gi")})},
			rl("cpu", "1", "memory", "1Gi"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.in[0].Resources.DeepCopy()
			got := WithLimitRangeDefaults(tc.in, "default", tc.lrs)
			sameResources(t, "requests", got[0].Resources.Requests, tc.wantRequests)
			sameResources(t, "limits", got[0].Resources.Limits, tc.wantLimits)
			sameResources(t, "the input's requests", tc.in[0].Resources.Requests, before.Requests)
			sameResources(t, "the input's limits", tc.in[0].Resources.Limits, before.Limits)
		})
	}
}

// A DaemonSet's overhead is its newest running pod where one runs (the API server's admission,
// webhooks included, made it), with the template's node affinity (the DaemonSet controller pins
// each pod to its node); before any runs, the template with its namespace's LimitRange defaults.
func TestDaemonSetOverheadIsWhatItsPodsAsk(t *testing.T) {
	affinity := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: []string{"amd64"}}}}}}}}
	ds := appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "default", UID: "ds-uid"}}
	ds.Spec.Template.Spec = corev1.PodSpec{Affinity: affinity, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
		Limits: rl("memory", "1Gi")}}}}
	lrs := []corev1.LimitRange{{ObjectMeta: metav1.ObjectMeta{Name: "lr", Namespace: "default"}, Spec: corev1.LimitRangeSpec{Limits: []corev1.LimitRangeItem{
		{Type: corev1.LimitTypeContainer, DefaultRequest: rl("cpu", "2", "memory", "1Gi")}}}}}

	got := DaemonSetPods([]appsv1.DaemonSet{ds}, nil, lrs)
	if len(got) != 1 {
		t.Fatalf("%d overhead pods, want 1", len(got))
	}
	sameResources(t, "before any pod runs: requests", got[0].Spec.Containers[0].Resources.Requests, rl("cpu", "2", "memory", "1Gi"))
	if ds.Spec.Template.Spec.Containers[0].Resources.Requests != nil {
		t.Errorf("the DaemonSet's template was changed: %v", ds.Spec.Template.Spec.Containers[0].Resources)
	}

	pod := func(name string, created int64, cpu string, owner types.UID) *corev1.Pod {
		yes := true
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", CreationTimestamp: metav1.Unix(created, 0),
			OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", UID: owner, Controller: &yes}}},
			Spec: corev1.PodSpec{NodeName: "n-" + name, Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
					MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n-" + name}}}}}}}},
				Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: rl("cpu", cpu)}},
					{Name: "sidecar", Resources: corev1.ResourceRequirements{Requests: rl("cpu", "100m")}}}}}
	}
	bound := map[string][]*corev1.Pod{"n-old": {pod("old", 100, "1", "ds-uid")}, "n-new": {pod("new", 200, "3", "ds-uid")},
		"n-stranger": {pod("stranger", 300, "9", "other-uid")}}
	got = DaemonSetPods([]appsv1.DaemonSet{ds}, bound, lrs)
	if n := len(got[0].Spec.Containers); n != 2 {
		t.Fatalf("the newest pod's containers (webhook's sidecar included) are charged: %d containers, want 2", n)
	}
	sameResources(t, "the newest pod's requests", got[0].Spec.Containers[0].Resources.Requests, rl("cpu", "3"))
	if got[0].Spec.Affinity != affinity {
		t.Errorf("affinity %v, want the template's (not the pod's pin to its node)", got[0].Spec.Affinity)
	}
}
