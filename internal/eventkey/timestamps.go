package eventkey

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/events"
)

// CoreV1Sink is an events API sink that stores events through the core/v1 API, with their first
// and last timestamps and count, as Karpenter's (and kubectl's, and most dashboards') events
// read. The events API recorder keeps the events API's series, deduplication and rate limits;
// but the events API itself refuses those timestamps beside its eventTime, so an event it stores
// has none in the core/v1 view, and `kubectl get events --sort-by=.lastTimestamp` — the sort
// every runbook uses — shows `<nil>` for it and cannot order it. A repeat of an event moves its
// lastTimestamp and count, as the core/v1 recorder's does.
func CoreV1Sink(c corev1client.EventsGetter) events.EventSink { return coreSink{c} }

type coreSink struct{ c corev1client.EventsGetter }

// core is the event in the core/v1 API's terms, without an eventTime (the core/v1 view of an
// event that has one hides these timestamps).
func core(e *eventsv1.Event) *corev1.Event {
	first := metav1.NewTime(e.EventTime.Time)
	last, count := first, int32(1)
	if s := e.Series; s != nil {
		last, count = metav1.NewTime(s.LastObservedTime.Time), s.Count
	}
	return &corev1.Event{ObjectMeta: *e.ObjectMeta.DeepCopy(), InvolvedObject: e.Regarding, Related: e.Related,
		Reason: e.Reason, Message: e.Note, Type: e.Type, Action: e.Action,
		Source:              corev1.EventSource{Component: e.ReportingController},
		ReportingController: e.ReportingController, ReportingInstance: e.ReportingInstance,
		FirstTimestamp: first, LastTimestamp: last, Count: count}
}

// stored is the event the recorder keeps, with what the API server gave the stored one (its
// name, resource version).
func stored(e *eventsv1.Event, c *corev1.Event) *eventsv1.Event {
	out := e.DeepCopy()
	out.ObjectMeta = *c.ObjectMeta.DeepCopy()
	return out
}

func (s coreSink) Create(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	c, err := s.c.Events(e.Namespace).Create(ctx, core(e), metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return stored(e, c), nil
}

func (s coreSink) Update(ctx context.Context, e *eventsv1.Event) (*eventsv1.Event, error) {
	c, err := s.c.Events(e.Namespace).Update(ctx, core(e), metav1.UpdateOptions{})
	if err != nil {
		return nil, err
	}
	return stored(e, c), nil
}

// Patch writes a repeat: the recorder's patch is of the events API's series, which the core/v1
// event holds as its lastTimestamp and count.
func (s coreSink) Patch(ctx context.Context, e *eventsv1.Event, _ []byte) (*eventsv1.Event, error) {
	c := core(e)
	data, err := json.Marshal(map[string]any{"lastTimestamp": c.LastTimestamp, "count": c.Count})
	if err != nil {
		return nil, fmt.Errorf("writing the event's patch: %w", err)
	}
	patched, err := s.c.Events(e.Namespace).Patch(ctx, e.Name, types.MergePatchType, data, metav1.PatchOptions{})
	if err != nil {
		return nil, err
	}
	return stored(e, patched), nil
}
