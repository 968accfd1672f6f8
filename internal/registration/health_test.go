package registration

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func pool(status metav1.ConditionStatus) *karpv1.NodePool {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "pool-1"}}
	if status != "" {
		np.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeNodeRegistrationHealthy, Status: status, Reason: "R"}}
	}
	return np
}

func TestTwoFailuresInFourMakeThePoolUnhealthyAndOneRegistrationHealsIt(t *testing.T) {
	var tr Tracker
	np := pool("")
	n := 0
	record := func(ok bool) metav1.ConditionStatus {
		n++
		got := tr.Record(np, types.UID(fmt.Sprint("claim-", n)), ok)
		np.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeNodeRegistrationHealthy, Status: got, Reason: "R"}}
		return got
	}
	for i, c := range []struct {
		ok   bool
		want metav1.ConditionStatus
	}{
		{false, metav1.ConditionUnknown}, // one failure says nothing yet
		{false, metav1.ConditionFalse},   // two of the last four
		{true, metav1.ConditionTrue},     // a node registered
		{false, metav1.ConditionFalse},   // two failures still among the last four, the latest one
		{true, metav1.ConditionTrue},
		{true, metav1.ConditionTrue},
		{false, metav1.ConditionFalse}, // last four F T T F: half failed, the latest too
		{true, metav1.ConditionTrue},
		{true, metav1.ConditionTrue},
		{true, metav1.ConditionTrue},
		{false, metav1.ConditionTrue}, // last four T T T F: one failure is not enough
	} {
		if got := record(c.ok); got != c.want {
			t.Fatalf("outcome %d (registered=%v): status %s, want %s", i, c.ok, got, c.want)
		}
	}
}

func TestARetriedOutcomeCountsOnce(t *testing.T) {
	var tr Tracker
	np := pool("")
	tr.Record(np, "a", false)
	if got := tr.Record(np, "a", false); got != metav1.ConditionUnknown {
		t.Fatalf("the same claim's failure recorded twice made the pool %s", got)
	}
}

func TestTheRecordIsSeededFromTheConditionAndReset(t *testing.T) {
	var tr Tracker
	np := pool(metav1.ConditionFalse)
	// After a restart: the pool was unhealthy; one more failure keeps it so, one registration heals it.
	if got := tr.Record(np, "a", false); got != metav1.ConditionFalse {
		t.Fatalf("seeded False + a failure: %s", got)
	}
	if got := tr.Record(np, "b", true); got != metav1.ConditionTrue {
		t.Fatalf("seeded False + a registration: %s", got)
	}
	tr.Reset(np.UID)
	np = pool(metav1.ConditionUnknown)
	if got := tr.Record(np, "c", false); got != metav1.ConditionUnknown {
		t.Fatalf("after a reset one failure made the pool %s", got)
	}
}
