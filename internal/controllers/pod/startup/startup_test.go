package startup

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func summary(t *testing.T, m *metrics.Metrics) (uint64, float64) {
	t.Helper()
	var out dto.Metric
	if err := m.PodStartupDuration.Write(&out); err != nil {
		t.Fatal(err)
	}
	return out.GetSummary().GetSampleCount(), out.GetSummary().GetSampleSum()
}

// A pod's startup is recorded once, when it is running and ready: ready time − creation.
func TestPodStartupIsRecordedOnceWhenReady(t *testing.T) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	c := &Controller{Client: env.Client, Clock: clocktesting.NewFakeClock(pod.CreationTimestamp.Add(-time.Minute)), Metrics: m}
	reconcileOnce := func() {
		if _, err := c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pod)}); err != nil {
			t.Fatal(err)
		}
	}
	reconcileOnce()
	if n, _ := summary(t, m); n != 0 {
		t.Fatal("a pending pod's startup was recorded")
	}
	ready := metav1.NewTime(pod.CreationTimestamp.Add(42 * time.Second))
	pod.Status.Phase = corev1.PodRunning
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready}}
	if err := env.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	reconcileOnce()
	reconcileOnce()
	if n, sum := summary(t, m); n != 1 || sum != 42 {
		t.Fatalf("recorded %d startups summing %vs, want one of 42s", n, sum)
	}
}
