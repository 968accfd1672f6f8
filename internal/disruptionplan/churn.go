package disruptionplan

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// replacedWithin is how soon after an eviction a pod of the same controller is taken as the
// evicted pod's replacement: a ReplicaSet recreates an evicted pod within seconds.
const replacedWithin = 5 * time.Minute

// movedPods answers whether a pod is one consolidation moved recently: the evicted pod itself
// (a StatefulSet's pod keeps its name) or the pod its controller created to replace it.
type movedPods struct {
	byName  map[string]time.Time
	byOwner map[types.UID][]time.Time
}

func newMovedPods(evictions []Eviction, now time.Time, memory time.Duration) *movedPods {
	m := &movedPods{byName: map[string]time.Time{}, byOwner: map[types.UID][]time.Time{}}
	for _, e := range evictions {
		if now.Sub(e.At) >= memory {
			continue
		}
		key := e.Namespace + "/" + e.Name
		if e.At.After(m.byName[key]) {
			m.byName[key] = e.At
		}
		if e.Owner != "" {
			m.byOwner[e.Owner] = append(m.byOwner[e.Owner], e.At)
		}
	}
	return m
}

// moved returns when the pod (or the pod it replaced) was evicted by a consolidation.
func (m *movedPods) moved(p *corev1.Pod) (time.Time, bool) {
	if at, ok := m.byName[p.Namespace+"/"+p.Name]; ok {
		return at, true
	}
	owner := metav1.GetControllerOf(p)
	if owner == nil {
		return time.Time{}, false
	}
	created := p.CreationTimestamp.Time
	for _, at := range m.byOwner[owner.UID] {
		if !created.Before(at.Add(-time.Second)) && created.Sub(at) <= replacedWithin {
			return at, true
		}
	}
	return time.Time{}, false
}
