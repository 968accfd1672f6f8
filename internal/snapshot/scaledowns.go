package snapshot

import (
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"capstan.dev/capstan/internal/disruptionplan"
)

// scaleDownMemory is how long a scale-down is remembered: far longer than any wait it causes.
const scaleDownMemory = time.Hour

// ScaleDowns remembers which scalable owners were seen shrinking, for the decision core's wait
// for scale-downs in progress: an owner shrinks when its desired replicas fall between two
// sightings, or while it has more replicas than it wants. Several readers may share one (the
// disruption controller's rounds and the deletion-cost ranking): it has its own lock. The zero
// value is ready to use.
type ScaleDowns struct {
	mu sync.Mutex
	// desired is each owner's desired replicas as last seen; seen its last scale-down.
	desired map[types.UID]int32
	seen    map[types.UID]disruptionplan.ScaleDown
}

// scalable is what the tracker needs of a ReplicaSet or StatefulSet.
type scalable struct {
	uid              types.UID
	name             string
	desired, current int32
}

func replicaSets(items []appsv1.ReplicaSet) []scalable {
	out := make([]scalable, 0, len(items))
	for i := range items {
		rs := &items[i]
		out = append(out, newScalable("ReplicaSet", &rs.ObjectMeta, rs.Spec.Replicas, rs.Status.Replicas))
	}
	return out
}

func statefulSets(items []appsv1.StatefulSet) []scalable {
	out := make([]scalable, 0, len(items))
	for i := range items {
		ss := &items[i]
		out = append(out, newScalable("StatefulSet", &ss.ObjectMeta, ss.Spec.Replicas, ss.Status.Replicas))
	}
	return out
}

// newScalable is an owner of the kind as the tracker sees it.
func newScalable(kind string, m *metav1.ObjectMeta, desired *int32, current int32) scalable {
	return scalable{uid: m.UID, name: fmt.Sprintf("%s %s/%s", kind, m.Namespace, m.Name), desired: desiredReplicas(desired), current: current}
}

// desiredReplicas is spec.replicas, which the API defaults to 1.
func desiredReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// observe records the owners seen shrinking now and returns the scale-downs remembered. An owner
// seen for the first time (Capstan just started) counts only while it has more replicas than it
// wants; owners gone are forgotten.
func (s *ScaleDowns) observe(now time.Time, wait time.Duration, owners []scalable) []disruptionplan.ScaleDown {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.desired == nil {
		s.desired, s.seen = map[types.UID]int32{}, map[types.UID]disruptionplan.ScaleDown{}
	}
	present := make(map[types.UID]bool, len(owners))
	for _, o := range owners {
		present[o.uid] = true
		prev, known := s.desired[o.uid]
		s.desired[o.uid] = o.desired
		if !(known && o.desired < prev) && o.current <= o.desired {
			continue
		}
		sd := disruptionplan.ScaleDown{Owner: o.name, UID: o.uid, At: now, Since: now}
		if last, ok := s.seen[o.uid]; ok && now.Sub(last.At) < wait {
			sd.Since = last.Since
		}
		s.seen[o.uid] = sd
	}
	var out []disruptionplan.ScaleDown
	for uid, sd := range s.seen {
		if !present[uid] || now.Sub(sd.At) >= scaleDownMemory {
			delete(s.seen, uid)
			continue
		}
		out = append(out, sd)
	}
	for uid := range s.desired {
		if !present[uid] {
			delete(s.desired, uid)
		}
	}
	return out
}
