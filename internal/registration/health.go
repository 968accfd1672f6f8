// Package registration tracks whether each NodePool's launches register nodes: the outcome of
// its last launches (registered, or given up because the machine failed to launch or did not
// register in time) decides its NodeRegistrationHealthy condition, which the solver reads to try
// a failing pool after the others and disruption reads to hold drift replacements that could not
// register. The record lives in memory and is seeded from the condition after a restart, as
// Karpenter's is.
package registration

import (
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Window is how many of a pool's latest launch outcomes are kept, and FailuresToUnhealthy how
// many of them must have failed, the latest among them, for the pool to be unhealthy (Karpenter's
// rule: half of the last four). One registration makes the pool healthy again.
const (
	Window              = 4
	FailuresToUnhealthy = 2
)

// Tracker holds each pool's latest outcomes, by the pool's UID (a pool deleted and created again
// starts afresh). It is safe for concurrent use; the zero value is ready.
type Tracker struct {
	mu    sync.Mutex
	pools map[types.UID]*outcomes
}

type outcomes struct {
	// last are the latest outcomes, oldest first (true: registered).
	last []bool
	// claims are the claims whose outcome is recorded: a reconcile retried after a failed write
	// records nothing twice. Forgotten past maxRemembered claims.
	claims map[types.UID]bool
}

// maxRemembered bounds the claims a pool's record remembers; a retry comes seconds after the
// first try, long before a pool launches that many machines.
const maxRemembered = 1024

// Record adds the outcome of one of the pool's launches (claim is the NodeClaim's UID) and
// returns the status the pool's NodeRegistrationHealthy condition should have: True once a node
// registered, False once FailuresToUnhealthy of the last Window launches failed and the latest did,
// otherwise what the pool carries now.
func (t *Tracker) Record(np *karpv1.NodePool, claim types.UID, registered bool) metav1.ConditionStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.seeded(np)
	if !o.claims[claim] {
		if len(o.claims) >= maxRemembered {
			clear(o.claims)
		}
		o.claims[claim] = true
		o.last = append(o.last, registered)
		if len(o.last) > Window {
			o.last = o.last[len(o.last)-Window:]
		}
	}
	return o.status(current(np))
}

// Reset forgets the pool's outcomes: its spec or its NodeClass changed, and launches from now on
// tell whether the change fixed or broke it.
func (t *Tracker) Reset(uid types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pools, uid)
}

// seeded is the pool's record, seeded from its condition when there is none (after a restart):
// False counts as FailuresToUnhealthy failures, True as one registration.
func (t *Tracker) seeded(np *karpv1.NodePool) *outcomes {
	if t.pools == nil {
		t.pools = map[types.UID]*outcomes{}
	}
	o := t.pools[np.UID]
	if o == nil {
		o = &outcomes{claims: map[types.UID]bool{}}
		switch current(np) {
		case metav1.ConditionFalse:
			for range FailuresToUnhealthy {
				o.last = append(o.last, false)
			}
		case metav1.ConditionTrue:
			o.last = append(o.last, true)
		}
		t.pools[np.UID] = o
	}
	return o
}

func (o *outcomes) status(now metav1.ConditionStatus) metav1.ConditionStatus {
	if len(o.last) == 0 {
		return now
	}
	if o.last[len(o.last)-1] {
		return metav1.ConditionTrue
	}
	failed := 0
	for _, ok := range o.last {
		if !ok {
			failed++
		}
	}
	if failed >= FailuresToUnhealthy {
		return metav1.ConditionFalse
	}
	return now
}

// current is the pool's NodeRegistrationHealthy status (Unknown without the condition).
func current(np *karpv1.NodePool) metav1.ConditionStatus {
	if c := meta.FindStatusCondition(np.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy); c != nil {
		return c.Status
	}
	return metav1.ConditionUnknown
}

// Unhealthy reports whether the pool's NodeRegistrationHealthy condition is False.
func Unhealthy(np *karpv1.NodePool) bool {
	return meta.IsStatusConditionFalse(np.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy)
}
