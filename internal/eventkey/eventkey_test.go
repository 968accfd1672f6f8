package eventkey_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// recorder is a real broadcaster's recorder, writing to the test API server until the test ends.
func recorder(t *testing.T) events.EventRecorder {
	t.Helper()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	b.StartRecordingToSink(ctx.Done())
	return b.NewRecorder(env.Scheme, "eventkey-test")
}

// record sends the messages as events on one pod through a real broadcaster, with the action
// each gets, and returns the notes of the Events stored.
func record(t *testing.T, pod *corev1.Pod, action func(string) string, messages ...string) []string {
	t.Helper()
	rec := recorder(t)
	for _, m := range messages {
		rec.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", action(m), "%s", m)
		time.Sleep(100 * time.Millisecond) // in order, as passes are
	}
	var notes []string
	_ = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l := &eventsv1.EventList{}
		if err := env.Client.List(ctx, l, client.InNamespace(pod.Namespace)); err != nil {
			return false, err
		}
		notes = notes[:0]
		for _, e := range l.Items {
			if e.Regarding.Name == pod.Name {
				notes = append(notes, e.Note)
			}
		}
		return len(notes) >= 2, nil
	})
	return notes
}

func TestNewMessagesAreNewEvents(t *testing.T) {
	for _, tc := range []struct {
		name   string
		action func(string) string
		want   int
	}{
		// The recorder's behaviour this package exists for: one action, one event, first note.
		{"fixed action", func(string) string { return "Schedule" }, 1},
		{"keyed action", func(m string) string { return eventkey.Action("Schedule", m) }, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + tc.name[:5], Namespace: "default"},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
			if err := env.Client.Create(t.Context(), pod); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
			notes := record(t, pod, tc.action, "no instance type fits", "no instance type fits", "taint x not tolerated")
			if len(notes) != tc.want {
				t.Fatalf("notes %q, want %d event(s)", notes, tc.want)
			}
			if tc.want == 2 && (notes[0] == notes[1]) {
				t.Fatalf("notes %q, want both messages", notes)
			}
		})
	}
}

// The events API refuses a note over 1 KiB; through Clipping a longer message arrives, cut to
// MaxNote with "…".
func TestLongNotesAreClippedToWhatTheAPIStores(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-long", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pod) })
	long := strings.Repeat("node-é, ", 300)
	refused := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "p-long.raw", Namespace: "default"}, EventTime: metav1.NowMicro(),
		Regarding: corev1.ObjectReference{Kind: "Pod", Namespace: "default", Name: pod.Name, UID: pod.UID}, Type: corev1.EventTypeNormal,
		Reason: "Disrupting", Action: "Disrupt", ReportingController: "eventkey-test", ReportingInstance: "eventkey-test", Note: long}
	if err := env.Client.Create(t.Context(), refused); !apierrors.IsInvalid(err) {
		t.Fatalf("a %d-byte note: %v, want the API server to refuse it", len(long), err)
	}
	eventkey.Clipping(recorder(t)).Eventf(pod, nil, corev1.EventTypeNormal, "Disrupting", "Disrupt", "Disrupting %s", long)
	var note string
	_ = wait.PollUntilContextTimeout(t.Context(), 200*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		l := &eventsv1.EventList{}
		if err := env.Client.List(ctx, l, client.InNamespace(pod.Namespace)); err != nil {
			return false, err
		}
		for _, e := range l.Items {
			if e.Regarding.Name == pod.Name && e.Reason == "Disrupting" {
				note = e.Note
			}
		}
		return note != "", nil
	})
	if len(note) > eventkey.MaxNote || !strings.HasPrefix(note, "Disrupting node-é") || !strings.HasSuffix(note, "…") || !utf8.ValidString(note) {
		t.Fatalf("stored note of %d bytes: %.40q…; want the message clipped to %d bytes", len(note), note, eventkey.MaxNote)
	}
}
