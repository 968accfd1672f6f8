package provisioning

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// A pass tells every pod of a small batch where it should schedule; a burst tells its first
// nominatedEventBurst pods and then nominatedEventsPerSecond, whatever its size, so that events
// never become the API server's largest write load.
func TestNominatedEventsAreBoundedInABurst(t *testing.T) {
	np := pool("prov-nominated-events", func(np *karpv1.NodePool) {
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}}
	})
	p, rec := setup(t, np)
	clk := p.Clock.(*testingclock.FakeClock)
	ns := namespace(t)

	pendingPods(t, ns, "small", 40, "500m", nil)
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := nominatedEvents(rec); n != 40 {
		t.Fatalf("a pass of 40 pods sent %d Nominated events, want one per pod", n)
	}

	pendingPods(t, ns, "burst", 150, "500m", nil)
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := nominatedEvents(rec); n != nominatedEventBurst-40 {
		t.Fatalf("a burst of 150 pods right after sent %d Nominated events, want the %d left of the budget", n, nominatedEventBurst-40)
	}

	clk.Step(2 * time.Second)
	pendingPods(t, ns, "later", 30, "500m", nil)
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, want := nominatedEvents(rec), 2*nominatedEventsPerSecond; n != want {
		t.Fatalf("two seconds later, 30 new pods got %d Nominated events, want %d", n, want)
	}
}

// nominatedEvents drains the recorder and counts the Nominated events in it.
func nominatedEvents(rec *events.FakeRecorder) int {
	n := 0
	for {
		select {
		case e := <-rec.Events:
			if strings.Contains(e, "Nominated") {
				n++
			}
		default:
			return n
		}
	}
}
