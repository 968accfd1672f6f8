// Package interruption consumes the AWS interruption queue: EventBridge messages about Spot
// interruption warnings, rebalance recommendations, AWS Health scheduled changes and instance
// state changes, delivered to an SQS queue. For a message about one of Capstan's machines it
// deletes the NodeClaim (the termination controller drains it, provisioning replaces its pods),
// marks an interrupted Spot offering unavailable, and records events; then it deletes the
// message. A message whose handling fails is left on the queue: SQS redelivers it after its
// visibility timeout and, past the queue's maxReceiveCount, moves it to the dead-letter queue.
// A message that cannot be read is deleted (it would never succeed).
package interruption

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/awsevents"
	"capstan.dev/capstan/internal/cloudprovider"
	awsprovider "capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/metrics"
)

// Controller long-polls the queue and acts on its messages. It is a leader-only Runnable.
type Controller struct {
	Client      client.Client
	SQS         awsprovider.SQSAPI
	Queue       string
	Clock       clock.Clock
	Recorder    events.EventRecorder
	Metrics     *metrics.Metrics
	Unavailable *unavailable.Offerings
	// ReplaceOnRebalance replaces a machine on its Spot rebalance recommendation, before the
	// interruption warning (default: an event only, as Karpenter).
	ReplaceOnRebalance bool
	// WaitTime is the long-poll wait (default 20 s, SQS's maximum).
	WaitTime time.Duration
	// Backoff is the pause after a failed receive (default 10 s), doubling with each failure in a
	// row up to MaxBackoff (default 5 minutes). A message that fails does not pause the queue: it
	// stays there, comes back after its visibility timeout, and the others go on being read.
	Backoff, MaxBackoff time.Duration
	// Region is the controller's region. A message whose event is of another region, or of
	// another account than the queue's, is about no machine of this cluster (a queue or an
	// EventBridge rule shared by mistake): it is logged and dropped, and nothing is deleted for
	// it. Empty: regions are not compared.
	Region string

	queueURL, account string
}

// ReceiveError is a failure to reach the queue (finding it or receiving from it), as opposed to
// the failure of one message's handling.
type ReceiveError struct{ Err error }

func (e *ReceiveError) Error() string { return e.Err.Error() }
func (e *ReceiveError) Unwrap() error { return e.Err }

// NeedLeaderElection makes only the leader consume the queue.
func (c *Controller) NeedLeaderElection() bool { return true }

// Start receives until ctx ends.
func (c *Controller) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithValues("controller", "interruption", "queue", c.Queue)
	ctx = log.IntoContext(ctx, logger)
	pauses := c.pauses()
	for ctx.Err() == nil {
		err := c.Poll(ctx)
		var re *ReceiveError
		switch {
		case err == nil || ctx.Err() != nil:
			pauses = c.pauses()
		case !errors.As(err, &re):
			// Messages that failed are left on the queue for redelivery; read on.
			logger.Error(err, "handling interruption messages")
			pauses = c.pauses()
		default:
			pause := pauses.Step()
			logger.Error(err, "reading the interruption queue", "retry-in", pause.String())
			select {
			case <-ctx.Done():
			case <-c.Clock.After(pause):
			}
		}
	}
	return nil
}

// pauses are the waits after failed receives in a row.
func (c *Controller) pauses() *wait.Backoff {
	return &wait.Backoff{Duration: cmp.Or(c.Backoff, 10*time.Second), Factor: 2, Cap: cmp.Or(c.MaxBackoff, 5*time.Minute), Steps: math.MaxInt32}
}

// Poll receives one batch (long-polling) and handles its messages concurrently.
func (c *Controller) Poll(ctx context.Context) error {
	if c.queueURL == "" {
		out, err := c.SQS.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(c.Queue)})
		if err != nil {
			return &ReceiveError{fmt.Errorf("finding queue %s: %w", c.Queue, err)}
		}
		c.queueURL = aws.ToString(out.QueueUrl)
		c.account = accountOf(c.queueURL)
	}
	wait := c.WaitTime
	if wait == 0 {
		wait = 20 * time.Second
	}
	out, err := c.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(c.queueURL), MaxNumberOfMessages: 10,
		WaitTimeSeconds: int32(wait / time.Second), VisibilityTimeout: 20,
		MessageSystemAttributeNames: []sqstypes.MessageSystemAttributeName{sqstypes.MessageSystemAttributeNameSentTimestamp}})
	if err != nil {
		return &ReceiveError{fmt.Errorf("receiving from queue %s: %w", c.Queue, err)}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(out.Messages))
	for i, msg := range out.Messages {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.handleMessage(ctx, msg)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Controller) handleMessage(ctx context.Context, msg sqstypes.Message) error {
	logger := log.FromContext(ctx).WithValues("message-id", aws.ToString(msg.MessageId))
	m, err := awsevents.Parse(aws.ToString(msg.Body))
	if err != nil {
		c.Metrics.InterruptionMessage(awsevents.Unknown)
		logger.Error(err, "deleting an unreadable message")
		return c.delete(ctx, msg)
	}
	c.Metrics.InterruptionMessage(m.Type)
	if c.foreign(m) {
		logger.Info("dropping a message of another account or region", "type", m.Type, "account", m.Account, "region", m.Region,
			"own-account", c.account, "own-region", c.Region)
		return c.delete(ctx, msg)
	}
	if err := c.Handle(log.IntoContext(ctx, logger), m); err != nil {
		// Left on the queue: redelivered after the visibility timeout, then dead-lettered.
		return fmt.Errorf("handling %s message %s: %w", m.Type, aws.ToString(msg.MessageId), err)
	}
	return c.delete(ctx, msg)
}

// foreign reports whether the message's event names another account than the queue's or another
// region than the controller's (a side that is not known is not compared).
func (c *Controller) foreign(m awsevents.Message) bool {
	differ := func(theirs, ours string) bool { return theirs != "" && ours != "" && theirs != ours }
	return differ(m.Account, c.account) || differ(m.Region, c.Region)
}

// accountOf is the account a queue URL names (https://sqs.<region>.amazonaws.com/<account>/<name>),
// or "" when its first path segment is not an account ID.
func accountOf(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	first, _, _ := strings.Cut(strings.TrimPrefix(u.Path, "/"), "/")
	if len(first) != 12 || strings.Trim(first, "0123456789") != "" {
		return ""
	}
	return first
}

func (c *Controller) delete(ctx context.Context, msg sqstypes.Message) error {
	if _, err := c.SQS.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(c.queueURL), ReceiptHandle: msg.ReceiptHandle}); err != nil {
		return fmt.Errorf("deleting message %s: %w", aws.ToString(msg.MessageId), err)
	}
	age := time.Duration(-1)
	if ms, err := strconv.ParseInt(msg.Attributes[string(sqstypes.MessageSystemAttributeNameSentTimestamp)], 10, 64); err == nil {
		age = c.Clock.Since(time.UnixMilli(ms))
	}
	c.Metrics.InterruptionDeletedMessage(age)
	return nil
}

// Handle acts on a message: for each of Capstan's machines it names, an event, and — except for
// a rebalance recommendation, unless ReplaceOnRebalance — the NodeClaim's deletion. Handling a message twice (a redelivery
// after a crash) deletes nothing twice and launches nothing twice: a claim already being deleted
// is left alone, and replacements come from the pods, not from the message.
func (c *Controller) Handle(ctx context.Context, m awsevents.Message) error {
	claims := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, claims); err != nil {
		return fmt.Errorf("listing nodeclaims: %w", err)
	}
	var errs []error
	for _, id := range m.Instances {
		for i := range claims.Items {
			nc := &claims.Items[i]
			if !strings.HasSuffix(nc.Status.ProviderID, "/"+id) {
				continue
			}
			if err := c.handleClaim(ctx, m, nc); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// eventOf is the event each message type records on its NodeClaim.
var eventOf = map[string]struct{ reason, note string }{
	awsevents.SpotInterrupted:         {"SpotInterrupted", "Spot interruption warning: the instance is reclaimed in two minutes"},
	awsevents.RebalanceRecommendation: {"SpotRebalanceRecommendation", "Spot rebalance recommendation: the instance is at elevated risk of interruption"},
	awsevents.ScheduledChange:         {"InstanceScheduledChange", "AWS Health scheduled change for the instance"},
	awsevents.InstanceStopping:        {"InstanceStopping", "the instance is stopping"},
	awsevents.InstanceStopped:         {"InstanceStopped", "the instance stopped"},
	awsevents.InstanceTerminating:     {"InstanceTerminating", "the instance is terminating"},
	awsevents.InstanceTerminated:      {"InstanceTerminated", "the instance terminated"},
	awsevents.CapacityReservationInterrupted: {"CapacityReservationInterrupted",
		"capacity reservation interruption warning: the reservation reclaims the instance"},
	awsevents.InstanceStatusFailed: {"InstanceUnhealthy", "EC2's instance status check has failed for two minutes"},
	awsevents.SystemStatusFailed:   {"InstanceUnhealthy", "EC2's system status check has failed for two minutes"},
	awsevents.ScheduledEvent:       {"InstanceScheduledEvent", "EC2 scheduled a reboot, maintenance, retirement or stop for the instance"},
}

func (c *Controller) handleClaim(ctx context.Context, m awsevents.Message, nc *karpv1.NodeClaim) error {
	logger := log.FromContext(ctx).WithValues("NodeClaim", klog.KObj(nc), "message-type", m.Type)
	ev, ok := eventOf[m.Type]
	if !ok {
		return nil
	}
	reason, note := ev.reason, ev.note
	if c.Recorder != nil {
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, reason, "Interrupt", "%s", note)
	}
	if m.Type == awsevents.RebalanceRecommendation && !c.ReplaceOnRebalance {
		return nil
	}
	if m.Type == awsevents.SpotInterrupted && c.Unavailable != nil && nc.Labels[karpv1.CapacityTypeLabelKey] == karpv1.CapacityTypeSpot {
		c.Unavailable.MarkUnavailable(cloudprovider.OfferingKey{InstanceType: nc.Labels[corev1.LabelInstanceTypeStable],
			Zone: nc.Labels[karpv1.ZoneLabelKey], CapacityType: karpv1.CapacityTypeSpot})
	}
	if !nc.DeletionTimestamp.IsZero() {
		return nil
	}
	if err := c.Client.Delete(ctx, nc); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("deleting NodeClaim %s: %w", nc.Name, err))
	}
	c.Metrics.Disrupted(nc, "interruption")
	logger.Info("disrupting nodeclaim(s)", "reason", m.Type)
	return nil
}
