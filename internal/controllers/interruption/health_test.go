package interruption

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/tools/events"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/awsevents"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// TestUnhealthyInstancesAreReplaced: EC2's status checks, read through the real SDK from the
// local endpoints, decide — a reachability check failed for two minutes or a scheduled event
// deletes the machine's claim; a check failing for less, or a healthy machine, is left alone;
// each unhealthy instance is counted once per category however many polls see it.
func TestUnhealthyInstancesAreReplaced(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// Four running machines, each with its claim.
	var ids []string
	claims := map[string]*karpv1.NodeClaim{}
	for _, name := range []string{"impaired-long", "impaired-short", "maintenance", "healthy"} {
		inst := f.AWS.RunInstance(awsfake.Instance{Type: "m6i.large", Zone: "us-east-1a", ZoneID: "use1-az1", SubnetID: "subnet-01aaaaaaaaaaaaaaa",
			ImageID: "ami-00000000000000001", Tags: map[string]string{"karpenter.sh/nodeclaim": name}})
		ids = append(ids, inst.ID)
		claims[name] = spotClaim(t, "health-"+name, inst.ID)
	}
	now := f.Clock.Now()
	f.AWS.SetInstanceHealth(ids[0], awsfake.InstanceHealth{SystemImpairedSince: now.Add(-3 * time.Minute)})
	f.AWS.SetInstanceHealth(ids[1], awsfake.InstanceHealth{InstanceImpairedSince: now.Add(-time.Minute)})
	f.AWS.SetInstanceHealth(ids[2], awsfake.InstanceHealth{Events: []string{"system-maintenance"}})
	h := &Health{Client: env.Client, EC2: f.Clients.EC2, Clock: f.Clock, Recorder: events.NewFakeRecorder(100), Metrics: m}
	for range 2 {
		if err := h.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for name, want := range map[string]bool{"impaired-long": true, "impaired-short": false, "maintenance": true, "healthy": false} {
		if got := !get(t, claims[name]).DeletionTimestamp.IsZero(); got != want {
			t.Errorf("%s: being deleted %v, want %v", name, got, want)
		}
	}
	for kind, want := range map[string]float64{awsevents.SystemStatusFailed: 1, awsevents.InstanceStatusFailed: 0, awsevents.ScheduledEvent: 1} {
		if got := testutil.ToFloat64(m.InstanceUnhealthy.WithLabelValues(kind)); got != want {
			t.Errorf("unhealthy %s counted %v, want %v", kind, got, want)
		}
	}
	// A minute later the short failure has lasted two minutes: replaced too.
	f.Clock.Step(time.Minute)
	if err := h.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if get(t, claims["impaired-short"]).DeletionTimestamp.IsZero() {
		t.Error("impaired-short is not replaced after two minutes")
	}
}
