package provisioning

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/tools/events"
	testingclock "k8s.io/utils/clock/testing"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/solver"
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

// A pod no NodePool can take gets one FailedScheduling event that names the NodePool it came
// closest with and that one reason first, then the others.
func TestFailedSchedulingNamesTheClosestNodePool(t *testing.T) {
	tainted := pool("prov-closest-tainted", func(np *karpv1.NodePool) {
		np.Spec.Weight = new(int32(50))
		np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	})
	limited := pool("prov-closest-limited", func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	})
	p, rec := setup(t, tainted, limited)
	ns := namespace(t)
	pendingPods(t, ns, "wide", 1, "4", nil)
	if _, err := p.Provision(t.Context()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, "FailedScheduling") {
			got = append(got, e)
		}
	}
	want := "Failed to schedule pod, closest NodePool prov-closest-limited: limits exhausted: "
	if len(got) != 1 || !strings.Contains(got[0], want) ||
		!strings.Contains(got[0], "; other NodePools: prov-closest-tainted: taint dedicated=gpu:NoSchedule not tolerated") {
		t.Fatalf("FailedScheduling events %q, want one starting %q and then the tainted pool", got, want)
	}
}

// An event's message stays within the events API's 1 KiB: NodePools that do not fit are counted.
func TestUnschedulableMessageFitsAnEvent(t *testing.T) {
	u := solver.PodError{Reason: "every pool"}
	for i := range 60 {
		u.Pools = append(u.Pools, solver.PoolMiss{NodePool: fmt.Sprintf("pool-%02d", i), Stage: solver.MissRequirements,
			Reason: "incompatible requirements: label team=payments is not in the NodePool's team In [search]"})
	}
	u.Pools[37].Stage = solver.MissResources
	u.Pools[37].Reason = "no instance type has cpu 96 (the largest has cpu 64)"
	msg := UnschedulableMessage(u)
	if len(msg) > eventkey.MaxNote {
		t.Fatalf("message of %d bytes, want at most %d", len(msg), eventkey.MaxNote)
	}
	if !strings.HasPrefix(msg, "Failed to schedule pod, closest NodePool pool-37: no instance type has cpu 96 (the largest has cpu 64); other NodePools: pool-00: ") {
		t.Errorf("message %q does not start with the closest pool", msg)
	}
	listed := strings.Count(msg, "incompatible requirements")
	if want := fmt.Sprintf(" and %d more", 59-listed); !strings.HasSuffix(msg, want) {
		t.Errorf("message %q lists %d other pools, want it to end %q", msg, listed, want)
	}
}
