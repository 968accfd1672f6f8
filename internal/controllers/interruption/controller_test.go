package interruption

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/awsevents"
	"capstan.dev/capstan/internal/clocktest"
	"capstan.dev/capstan/internal/cloudprovider"
	awsprovider "capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

const queue = "capstan-interruption"

// fixture is a fake AWS with an interruption queue (dead-lettering after 3 receives) and a
// controller on it.
func fixture(t *testing.T, kube client.Client) (*awstest.Fixture, *Controller, *metrics.Metrics) {
	t.Helper()
	f := awstest.New(t, env.Client)
	f.AWS.CreateQueue(queue+"-dlq", "", 0)
	f.AWS.CreateQueue(queue, queue+"-dlq", 3)
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	c := &Controller{Client: kube, SQS: f.Clients.SQS, Queue: queue, Clock: f.Clock, Recorder: events.NewFakeRecorder(100),
		Metrics: m, Unavailable: f.Unavailable, WaitTime: time.Millisecond}
	return f, c, m
}

// spotClaim stores a launched spot NodeClaim for instance id, held by a finalizer as a real one
// is until its machine is gone.
func spotClaim(t *testing.T, name, id string) *karpv1.NodeClaim {
	t.Helper()
	ctx := context.Background()
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: []string{karpv1.TerminationFinalizer},
			Labels: map[string]string{karpv1.NodePoolLabelKey: "spot", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeSpot,
				corev1.LabelInstanceTypeStable: "m6i.large", karpv1.ZoneLabelKey: "us-east-1b"}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: &karpv1.NodeClassReference{Group: awsv1.Group, Kind: "EC2NodeClass", Name: "spot"},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{}},
	}
	if err := env.Client.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	nc.Status.ProviderID = "aws:///us-east-1b/" + id
	if err := env.Client.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := &karpv1.NodeClaim{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(nc), got) == nil {
			got.Finalizers = nil
			_ = env.Client.Update(ctx, got)
			_ = env.Client.Delete(ctx, got)
		}
	})
	return nc
}

func get(t *testing.T, nc *karpv1.NodeClaim) *karpv1.NodeClaim {
	t.Helper()
	got := &karpv1.NodeClaim{}
	if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(nc), got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestSpotWarningDeletesTheClaimOnceEvenWhenRedelivered(t *testing.T) {
	ctx := context.Background()
	f, c, m := fixture(t, env.Client)
	nc := spotClaim(t, "spot-warned", "i-0aaaaaaaaaaaaaaa1")
	other := spotClaim(t, "spot-other", "i-0aaaaaaaaaaaaaaa2")
	if err := f.AWS.SendMessage(queue, f.AWS.SpotInterruptionWarning("i-0aaaaaaaaaaaaaaa1")); err != nil {
		t.Fatal(err)
	}
	// The first handling deletes the claim, then dies before deleting the message.
	f.AWS.InjectFault("DeleteMessage", 1, awsfake.Fault{Code: "InternalError", Message: "killed"})
	if err := c.Poll(ctx); err == nil {
		t.Fatal("the failed delete must be reported")
	}
	first := get(t, nc)
	if first.DeletionTimestamp.IsZero() {
		t.Fatal("the warned claim is not being deleted")
	}
	if !get(t, other).DeletionTimestamp.IsZero() {
		t.Fatal("another claim was deleted")
	}
	if !f.Unavailable.IsUnavailable(cloudprovider.OfferingKey{InstanceType: "m6i.large", Zone: "us-east-1b", CapacityType: karpv1.CapacityTypeSpot}) {
		t.Error("the interrupted spot offering is still available")
	}
	if msgs := f.AWS.Messages(queue); len(msgs) != 1 {
		t.Fatalf("queue %v: the message must stay for redelivery", msgs)
	}
	// Redelivered after the visibility timeout: handled once more, nothing new, then deleted.
	f.Clock.Step(21 * time.Second)
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	again := get(t, nc)
	if !again.DeletionTimestamp.Equal(first.DeletionTimestamp) {
		t.Errorf("deletion timestamp moved: %v → %v", first.DeletionTimestamp, again.DeletionTimestamp)
	}
	claims := &karpv1.NodeClaimList{}
	if err := env.Client.List(ctx, claims); err != nil || len(claims.Items) != 2 {
		t.Fatalf("claims after redelivery: %d, %v", len(claims.Items), err)
	}
	if msgs := f.AWS.Messages(queue); len(msgs) != 0 {
		t.Fatalf("queue after the second handling: %v", msgs)
	}
	if got := testutil.ToFloat64(m.InterruptionReceived.WithLabelValues(awsevents.SpotInterrupted)); got != 2 {
		t.Errorf("received spot_interrupted %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.InterruptionDeleted); got != 1 {
		t.Errorf("deleted messages %v, want 1", got)
	}
	if n := testutil.CollectAndCount(m.InterruptionLatency); n != 1 {
		t.Errorf("queue duration series %d", n)
	}
}

func TestUnreadableMessagesAreDeletedAndTheLoopGoesOn(t *testing.T) {
	ctx := context.Background()
	f, c, m := fixture(t, env.Client)
	nc := spotClaim(t, "stopped", "i-0bbbbbbbbbbbbbbb1")
	rebalanced := spotClaim(t, "rebalanced", "i-0bbbbbbbbbbbbbbb2")
	for _, body := range []string{"not json", `{"source":"aws.ec2","detail-type":"Something New","detail":{}}`,
		f.AWS.StateChange("i-0bbbbbbbbbbbbbbb1", "stopped"), f.AWS.RebalanceRecommendation("i-0bbbbbbbbbbbbbbb2"),
		f.AWS.StateChange("i-0ccccccccccccccc1", "running")} {
		if err := f.AWS.SendMessage(queue, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if msgs := f.AWS.Messages(queue); len(msgs) != 0 {
		t.Fatalf("left on the queue: %v", msgs)
	}
	if get(t, nc).DeletionTimestamp.IsZero() {
		t.Error("the stopped instance's claim is not being deleted")
	}
	if !get(t, rebalanced).DeletionTimestamp.IsZero() {
		t.Error("a rebalance recommendation deleted its claim")
	}
	if got := testutil.ToFloat64(m.InterruptionReceived.WithLabelValues(awsevents.Unknown)); got != 3 {
		t.Errorf("unknown messages %v, want 3 (two unreadable, one running state)", got)
	}
	if got := testutil.ToFloat64(m.InterruptionDeleted); got != 5 {
		t.Errorf("deleted messages %v, want 5", got)
	}
}

func TestMessagesThatKeepFailingEndInTheDeadLetterQueue(t *testing.T) {
	ctx := context.Background()
	ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	broken := interceptor.NewClient(ww, interceptor.Funcs{
		List: func(context.Context, client.WithWatch, client.ObjectList, ...client.ListOption) error {
			return errors.New("apiserver unavailable")
		}})
	f, c, _ := fixture(t, broken)
	if err := f.AWS.SendMessage(queue, f.AWS.ScheduledChange("i-0ddddddddddddddd1")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := c.Poll(ctx); err == nil || !strings.Contains(err.Error(), "apiserver unavailable") {
			t.Fatalf("poll %d: %v", i, err)
		}
		f.Clock.Step(21 * time.Second)
	}
	// The fourth receive finds it past maxReceiveCount: SQS moves it to the dead-letter queue.
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if msgs := f.AWS.Messages(queue); len(msgs) != 0 {
		t.Fatalf("still on the queue: %v", msgs)
	}
	if dlq := f.AWS.Messages(queue + "-dlq"); len(dlq) != 1 || !strings.Contains(dlq[0].Body, "scheduledChange") {
		t.Fatalf("dead-letter queue: %v", dlq)
	}
}

func TestParse(t *testing.T) {
	f := awstest.New(t, env.Client)
	for body, want := range map[string]awsevents.Message{
		f.AWS.SpotInterruptionWarning("i-01"):         {Type: awsevents.SpotInterrupted, Instances: []string{"i-01"}},
		f.AWS.StateChange("i-02", "shutting-down"):    {Type: awsevents.InstanceTerminating, Instances: []string{"i-02"}},
		f.AWS.StateChange("i-03", "terminated"):       {Type: awsevents.InstanceTerminated, Instances: []string{"i-03"}},
		f.AWS.StateChange("i-04", "stopping"):         {Type: awsevents.InstanceStopping, Instances: []string{"i-04"}},
		f.AWS.ScheduledChange("i-05", "i-06"):         {Type: awsevents.ScheduledChange, Instances: []string{"i-05", "i-06"}},
		f.AWS.RebalanceRecommendation("i-07"):         {Type: awsevents.RebalanceRecommendation, Instances: []string{"i-07"}},
		f.AWS.CapacityReservationInterruption("i-08"): {Type: awsevents.CapacityReservationInterrupted, Instances: []string{"i-08"}},
	} {
		got, err := awsevents.Parse(body)
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got.Type != want.Type || strings.Join(got.Instances, ",") != strings.Join(want.Instances, ",") || got.Time.IsZero() {
			t.Errorf("%s: %+v, want %+v", body, got, want)
		}
	}
	for _, body := range []string{"", "{", `{"source":"aws.ec2","detail-type":"EC2 Spot Instance Interruption Warning","detail":{"instance-id":"vol-1"}}`} {
		if _, err := awsevents.Parse(body); !errors.Is(err, awsevents.ErrUnreadable) {
			t.Errorf("%q: %v, want ErrUnreadable", body, err)
		}
	}
}

// A message whose handling fails is left for redelivery without pausing the queue: the next
// message is handled at once. The clock never moves here, so a pause would hold it forever.
func TestAFailingMessageDoesNotHoldUpTheQueue(t *testing.T) {
	ww, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var lists atomic.Int32
	flaky := interceptor.NewClient(ww, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if lists.Add(1) == 1 {
				return errors.New("apiserver unavailable")
			}
			return c.List(ctx, list, opts...)
		}})
	f, c, _ := fixture(t, flaky)
	nc := spotClaim(t, "spot-after-failure", "i-0eeeeeeeeeeeeeee1")
	if err := f.AWS.SendMessage(queue, f.AWS.ScheduledChange("i-0eeeeeeeeeeeeeee9")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); lists.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first message was never handled")
		}
	}
	if err := f.AWS.SendMessage(queue, f.AWS.SpotInterruptionWarning("i-0eeeeeeeeeeeeeee1")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); get(t, nc).DeletionTimestamp.IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("after a failed message, the next one waited: the warned claim is not being deleted")
		}
	}
	// The handled message is deleted after its claim (the claim's deletion is seen first): wait
	// for the queue to settle rather than race the delete.
	handled := func() bool {
		msgs := f.AWS.Messages(queue)
		return len(msgs) == 1 && strings.Contains(msgs[0].Body, "scheduledChange")
	}
	for deadline := time.Now().Add(30 * time.Second); !handled(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("queue %v: the failed message must stay for redelivery, the handled one go", f.AWS.Messages(queue))
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !handled() {
		t.Errorf("queue %v after the controller stopped: the failed message must stay, the handled one go", f.AWS.Messages(queue))
	}
}

// countingSQS counts the receives.
type countingSQS struct {
	awsprovider.SQSAPI
	receives atomic.Int32
}

func (c *countingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.receives.Add(1)
	return c.SQSAPI.ReceiveMessage(ctx, in, opts...)
}

// Receives that fail in a row are retried after pauses that double from Backoff: 10, 20, 40 and
// 80 s after four failures, on the injected clock.
func TestFailedReceivesBackOff(t *testing.T) {
	f, c, _ := fixture(t, env.Client)
	sqsc := &countingSQS{SQSAPI: c.SQS}
	c.SQS, c.Clock = sqsc, clocktest.Stepping{FakeClock: f.Clock}
	f.AWS.InjectFault("ReceiveMessage", 4, awsfake.Fault{Code: "AccessDenied", Message: "not allowed"})
	start := f.Clock.Now()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	for deadline := time.Now().Add(30 * time.Second); sqsc.receives.Load() < 5; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d receives after 30 s", sqsc.receives.Load())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if waited := f.Clock.Since(start); waited != 150*time.Second {
		t.Errorf("paused %s in all after four failed receives, want 10+20+40+80 s", waited)
	}
}

// TestRebalanceAndReservationMessages: a capacity reservation's interruption warning replaces
// the machine; a rebalance recommendation is an event only, unless ReplaceOnRebalance.
func TestRebalanceAndReservationMessages(t *testing.T) {
	ctx := context.Background()
	f, c, _ := fixture(t, env.Client)
	reserved := spotClaim(t, "reservation-reclaim", "i-0ccccccccccccccc1")
	rebalanced := spotClaim(t, "rebalance-recommended", "i-0ccccccccccccccc2")
	for _, body := range []string{f.AWS.CapacityReservationInterruption("i-0ccccccccccccccc1"), f.AWS.RebalanceRecommendation("i-0ccccccccccccccc2")} {
		if err := f.AWS.SendMessage(queue, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if get(t, reserved).DeletionTimestamp.IsZero() {
		t.Error("the reservation's reclaimed machine is not being replaced")
	}
	if !get(t, rebalanced).DeletionTimestamp.IsZero() {
		t.Error("a rebalance recommendation replaced the machine by default")
	}
	c.ReplaceOnRebalance = true
	if err := f.AWS.SendMessage(queue, f.AWS.RebalanceRecommendation("i-0ccccccccccccccc2")); err != nil {
		t.Fatal(err)
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if get(t, rebalanced).DeletionTimestamp.IsZero() {
		t.Error("with ReplaceOnRebalance the recommended machine is not being replaced")
	}
}

// A message whose event is of another account than the queue's, or of another region than the
// controller's (a queue or an EventBridge rule shared by mistake), names no machine of this
// cluster: it is dropped — deleted from the queue — and no claim is touched, even one whose
// instance ID it names. A message of the controller's own account and region still acts.
func TestMessagesOfAnotherAccountOrRegionAreDropped(t *testing.T) {
	ctx := context.Background()
	f, c, _ := fixture(t, env.Client)
	nc := spotClaim(t, "spot-foreign", "i-0ccccccccccccccc1")
	own := f.AWS.SpotInterruptionWarning("i-0ccccccccccccccc1")
	var event map[string]any
	if err := json.Unmarshal([]byte(own), &event); err != nil {
		t.Fatal(err)
	}
	c.Region = event["region"].(string)
	for _, edit := range []map[string]any{{"account": "999999999999"}, {"region": "eu-west-1"}} {
		foreign := maps.Clone(event)
		maps.Copy(foreign, edit)
		body, err := json.Marshal(foreign)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.AWS.SendMessage(queue, string(body)); err != nil {
			t.Fatal(err)
		}
		if err := c.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		if !get(t, nc).DeletionTimestamp.IsZero() {
			t.Fatalf("a message with %v deleted the claim of an instance with the same ID", edit)
		}
		if msgs := f.AWS.Messages(queue); len(msgs) != 0 {
			t.Fatalf("a message with %v was left on the queue: %v", edit, msgs)
		}
	}
	if err := f.AWS.SendMessage(queue, own); err != nil {
		t.Fatal(err)
	}
	if err := c.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if get(t, nc).DeletionTimestamp.IsZero() {
		t.Fatal("the message of the controller's own account and region did not act")
	}
}
