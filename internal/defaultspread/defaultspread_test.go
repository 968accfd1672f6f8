package defaultspread

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func TestParseAcceptsTheSchedulersShapeAndNamesBadFields(t *testing.T) {
	c, err := Parse(`
podTopologySpread:
  defaultConstraints:
  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
  - {maxSkew: 3, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}
`)
	if err != nil || len(c.Constraints()) != 2 || c.Constraints()[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Fatalf("config %+v, error %v", c, err)
	}
	if c, err := Parse("  "); err != nil || c.Constraints() != nil {
		t.Fatalf("empty: %+v, %v", c, err)
	}
	for doc, want := range map[string]string{
		`podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}`:                                                              "defaultConstraints[0].maxSkew 0",
		`podTopologySpread: {defaultConstraints: [{maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]}`:                                                                                 "defaultConstraints[0].topologyKey: must be set",
		`podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: "a b", whenUnsatisfiable: DoNotSchedule}]}`:                                                             `topologyKey "a b"`,
		`podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Sometimes}]}`:                                                                  `whenUnsatisfiable "Sometimes"`,
		`podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}`:                                           "labelSelector: must not be set",
		`podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, matchLabelKeys: [app]}]}`:                                       "matchLabelKeys",
		`podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: z, whenUnsatisfiable: DoNotSchedule}, {maxSkew: 2, topologyKey: z, whenUnsatisfiable: DoNotSchedule}]}`: "defaultConstraints[1]: repeats defaultConstraints[0]",
		`podTopologySpread: {defaultConstraint: []}`: "unknown field",
		`profiles: []`: "unknown field",
	} {
		if _, err := Parse(doc); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", doc, err, want)
		}
	}
}

// The selector is the kube-scheduler's: the labels of the Services selecting the pod, plus its
// ReplicaSet's selector as requirements; a pod with constraints of its own, or nothing to deduce
// a selector from, is left as it is — and the pods given constraints are copies.
func TestApplyDeducesTheSchedulersSelector(t *testing.T) {
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "spread-"}}
	if err := env.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), ns) })
	create := func(o client.Object) {
		t.Helper()
		o.SetNamespace(ns.Name)
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
		Ports: []corev1.ServicePort{{Port: 80}}}})
	create(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "other"},
		Ports: []corev1.ServicePort{{Port: 80}}}})
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: appsv1.ReplicaSetSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "pod-template-hash": "1"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web", "pod-template-hash": "1"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}}}
	create(rs)
	pod := func(name string, lbls map[string]string, owner bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: lbls}}
		if owner {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptrTo(true)}}
		}
		return p
	}
	own := pod("own", map[string]string{"app": "web"}, true)
	own.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 2, TopologyKey: "kubernetes.io/hostname", WhenUnsatisfiable: corev1.ScheduleAnyway}}
	in := []*corev1.Pod{
		pod("web", map[string]string{"app": "web", "pod-template-hash": "1"}, true),
		pod("lonely", map[string]string{"app": "nobody"}, false),
		own,
	}
	zone := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "topology.kubernetes.io/zone", WhenUnsatisfiable: corev1.DoNotSchedule}
	out := (&Applier{Reader: env.Client, Constraints: []corev1.TopologySpreadConstraint{zone}}).Apply(ctx, in)
	web := out[0]
	if web == in[0] || len(in[0].Spec.TopologySpreadConstraints) != 0 {
		t.Fatal("the pod given constraints is not a copy")
	}
	if len(web.Spec.TopologySpreadConstraints) != 1 {
		t.Fatalf("web's constraints %+v", web.Spec.TopologySpreadConstraints)
	}
	got := web.Spec.TopologySpreadConstraints[0]
	want := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}, MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}},
		{Key: "pod-template-hash", Operator: metav1.LabelSelectorOpIn, Values: []string{"1"}}}}
	if got.TopologyKey != zone.TopologyKey || got.MaxSkew != 1 || got.WhenUnsatisfiable != corev1.DoNotSchedule || got.LabelSelector.String() != want.String() {
		t.Fatalf("web's constraint %+v, want the zone constraint with selector %s", got, want)
	}
	if out[1] != in[1] || len(out[1].Spec.TopologySpreadConstraints) != 0 {
		t.Fatalf("a pod no Service or controller selects got %+v", out[1].Spec.TopologySpreadConstraints)
	}
	if out[2] != in[2] || len(out[2].Spec.TopologySpreadConstraints) != 1 || out[2].Spec.TopologySpreadConstraints[0].MaxSkew != 2 {
		t.Fatalf("a pod with its own constraints got %+v", out[2].Spec.TopologySpreadConstraints)
	}
}

func ptrTo[T any](v T) *T { return &v }
