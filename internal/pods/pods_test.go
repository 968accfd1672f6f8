package pods

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func TestDoNotDisrupt(t *testing.T) {
	start := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		value   *string
		started bool
		at      time.Duration
		want    bool
	}{
		{"no annotation", nil, true, 0, false},
		{"true", ptr("true"), true, 1000 * time.Hour, true},
		{"false", ptr("false"), true, 0, false},
		{"within a duration of the start", ptr("5m"), true, 4 * time.Minute, true},
		{"past a duration of the start", ptr("5m"), true, 5 * time.Minute, false},
		{"duration from creation before the pod starts", ptr("1h"), false, 59 * time.Minute, true},
		{"unreadable value protects", ptr("yes"), true, 1000 * time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(start.Add(-time.Hour))}}
			if tc.started {
				p.Status.StartTime = &metav1.Time{Time: start}
			} else {
				p.CreationTimestamp = metav1.NewTime(start)
			}
			if tc.value != nil {
				p.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: *tc.value}
			}
			if got := DoNotDisrupt(p, start.Add(tc.at)); got != tc.want {
				t.Fatalf("DoNotDisrupt = %v, want %v", got, tc.want)
			}
		})
	}
}

func ptr(s string) *string { return &s }
