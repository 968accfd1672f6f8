package localcluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clocktesting "k8s.io/utils/clock/testing"

	"capstan.dev/capstan/internal/testenv"
)

// apiServer starts an API server (no kwok: every bound pod stays Pending), stopped when the test
// ends, and returns a client of it.
func apiServer(t *testing.T) kubernetes.Interface {
	t.Helper()
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// The nudger touches only pods bound to kwok's nodes that have been Pending for its wait past
// their ready delay and past their last nudge (no kwok runs here, so every bound pod stays
// Pending).
func TestNudgeOnlyPodsKwokLeftPendingPastTheirWait(t *testing.T) {
	cs := apiServer(t)
	ctx := t.Context()
	for name, kwok := range map[string]bool{"kwok-a": true, "real-b": false} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if kwok {
			n.Annotations = map[string]string{KwokNodeAnnotation: "fake"}
		}
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var base time.Time
	for _, p := range []struct {
		name, node, delay string
	}{
		{"on-kwok", "kwok-a", ""},
		{"on-kwok-delayed", "kwok-a", "60s"},
		{"on-another-node", "real-b", ""},
		{"unbound", "", ""},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: "default"},
			Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "c", Image: "pause"}}},
		}
		if p.delay != "" {
			pod.Annotations = map[string]string{ReadyDelayAnnotation: p.delay}
		}
		created, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if created.CreationTimestamp.After(base) {
			base = created.CreationTimestamp.Time
		}
	}
	clk := clocktesting.NewFakePassiveClock(base)
	n := &nudger{client: cs, clock: clk, after: 30 * time.Second, log: testr.New(t)}
	for _, step := range []struct {
		at   time.Duration
		want []string
	}{
		{10 * time.Second, nil},
		{31 * time.Second, []string{"default/on-kwok"}},
		{40 * time.Second, nil},                                                    // nudged 9 s ago
		{62 * time.Second, []string{"default/on-kwok"}},                            // the delayed one is due at 60 s
		{95 * time.Second, []string{"default/on-kwok", "default/on-kwok-delayed"}}, // 35 s past its delay
	} {
		clk.SetTime(base.Add(step.at))
		got, err := n.pass(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, step.want) {
			t.Errorf("at +%s nudged %v, want %v", step.at, got, step.want)
		}
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, "on-kwok", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Annotations[NudgedAnnotation], base.Add(95*time.Second).UTC().Format(time.RFC3339); got != want {
		t.Errorf("%s = %q, want %q", NudgedAnnotation, got, want)
	}
}

// A pass nudges at most maxNudges pods: kwok falling behind in a burst is not answered with a
// write per pod.
func TestANudgePassIsBounded(t *testing.T) {
	cs := apiServer(t)
	ctx := t.Context()
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-a", Annotations: map[string]string{KwokNodeAnnotation: "fake"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range maxNudges + 10 {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "default"},
			Spec: corev1.PodSpec{NodeName: "kwok-a", Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	n := &nudger{client: cs, clock: clocktesting.NewFakePassiveClock(time.Now().Add(time.Hour)), after: 30 * time.Second, log: testr.New(t)}
	got, err := n.pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != maxNudges {
		t.Fatalf("nudged %d pods in one pass, want %d", len(got), maxNudges)
	}
}
