package disruption

import (
	"fmt"
	"strings"
	"testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/eventkey"
)

// An event about a command over a hundred nodes names five and counts the rest, so that its
// prices and rule fit in what the events API keeps.
func TestACommandOverManyNodesIsToldInOneEvent(t *testing.T) {
	st := &commandState{Method: disruptionplan.MethodMultiNode, Reason: karpv1.DisruptionReasonUnderutilized, PriceBefore: 12.5, PriceAfter: 0}
	for i := range 100 {
		st.candidates = append(st.candidates, fmt.Sprintf("general-purpose-spot-pool-%02d-abcde", i))
	}
	msg := describe(st, &disruptionplan.Command{Method: disruptionplan.MethodMultiNode})
	for _, want := range []string{"general-purpose-spot-pool-04-abcde and 95 more", "$12.5000/h → $0.0000/h", "0 pod(s) evicted"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if len(msg) > eventkey.MaxNote {
		t.Errorf("message of %d bytes, more than the events API keeps (%d)", len(msg), eventkey.MaxNote)
	}
}
