package eventkey_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/eventkey"
)

// An event written through CoreV1Sink reads, in the core/v1 view kubectl's
// `--sort-by=.lastTimestamp` uses, with its first and last timestamps and a count; through the
// events API they are empty.
func TestEventsCarryTheTimestampsKubectlSortsBy(t *testing.T) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		sink    events.EventSink
		stamped bool
	}{
		{"plain", &events.EventSinkImpl{Interface: cs.EventsV1()}, false},
		{"core", eventkey.CoreV1Sink(cs.CoreV1()), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-ts-" + tc.name, Namespace: "default"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
			if err := env.Client.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
			b := events.NewBroadcaster(tc.sink)
			ctx, cancel := context.WithCancel(context.Background())
			t.Cleanup(cancel)
			b.StartRecordingToSink(ctx.Done())
			b.NewRecorder(env.Scheme, "eventkey-test").Eventf(pod, nil, corev1.EventTypeNormal, "Nominated", "Schedule", "Pod should schedule on: nodeclaim/x")
			var got *corev1.Event
			_ = wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
				l := &corev1.EventList{}
				if err := env.Client.List(ctx, l, client.InNamespace("default")); err != nil {
					return false, err
				}
				for i := range l.Items {
					if l.Items[i].InvolvedObject.Name == pod.Name {
						got = &l.Items[i]
					}
				}
				return got != nil, nil
			})
			if got == nil {
				t.Fatal("no event stored")
			}
			if stamped := !got.LastTimestamp.IsZero() && !got.FirstTimestamp.IsZero() && got.Count == 1; stamped != tc.stamped {
				t.Errorf("core/v1 event: firstTimestamp %v, lastTimestamp %v, count %d; want them set: %v", got.FirstTimestamp, got.LastTimestamp, got.Count, tc.stamped)
			}
		})
	}
}

// A repeated event (its series) moves its lastTimestamp and count.
func TestARepeatedEventMovesItsLastTimestamp(t *testing.T) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sink := eventkey.CoreV1Sink(cs.CoreV1())
	first := time.Now().Add(-time.Minute).Truncate(time.Second)
	e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p-repeat.1", Namespace: "default"}, EventTime: metav1.NewMicroTime(first),
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: "p-repeat"}, Type: corev1.EventTypeWarning,
		Reason: "FailedScheduling", Action: "Schedule", ReportingController: "eventkey-test", ReportingInstance: "eventkey-test", Note: "no room"}
	created, err := sink.Create(t.Context(), e)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Events("default").Delete(context.Background(), created.Name, metav1.DeleteOptions{})
	})
	last := first.Add(30 * time.Second)
	created.Series = &eventsv1.EventSeries{Count: 3, LastObservedTime: metav1.NewMicroTime(last)}
	if _, err := sink.Patch(t.Context(), created, []byte(`{"series":{"count":3}}`)); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Events("default").Get(t.Context(), created.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !got.FirstTimestamp.Time.Equal(first) || !got.LastTimestamp.Time.Equal(last) || got.Count != 3 || got.Message != "no room" || got.Action != "Schedule" {
		t.Errorf("event after a repeat: first %v, last %v, count %d, message %q, action %q; want first %v, last %v, count 3",
			got.FirstTimestamp, got.LastTimestamp, got.Count, got.Message, got.Action, first, last)
	}
}
