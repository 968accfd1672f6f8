package awsfake

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Drill runs the runbook's drills against running local endpoints, through their control
// endpoint, as a person does on `make run CLOUD=aws` (`awsfake drill`) and the end-to-end tests
// do.
type Drill struct {
	// Endpoint is the endpoints' URL; Queue the interruption queue, DLQ its dead-letter queue.
	Endpoint, Queue, DLQ string
	// Kube is the cluster (the dead-letter drill refuses a deletion there).
	Kube client.Client
	// Out receives what the drill does, a line a step.
	Out io.Writer
	// Poll is how often the drill looks at the queues (default 1 s); Timeout bounds the
	// dead-letter drill (default 5 minutes).
	Poll, Timeout time.Duration
}

// get reads a control endpoint; a status other than 200 is an error carrying its body.
func (d *Drill) get(ctx context.Context, path string, q url.Values, into any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(d.Endpoint, "/")+AdminPrefix+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, strings.TrimSpace(string(b)))
	}
	if into == nil {
		return nil
	}
	return json.Unmarshal(b, into)
}

// Instance is the live instance named, or else the oldest live instance of the NodePool of the
// lifecycle ("spot", "on-demand"; empty: either).
func (d *Drill) Instance(ctx context.Context, id, nodepool, lifecycle string) (Instance, error) {
	var insts []Instance
	if err := d.get(ctx, "instances", nil, &insts); err != nil {
		return Instance{}, err
	}
	insts = slices.DeleteFunc(insts, func(i Instance) bool {
		live := i.State == "pending" || i.State == "running"
		if id != "" {
			return i.ID != id || !live
		}
		return !live || i.Tags[karpv1.NodePoolLabelKey] != nodepool || lifecycle != "" && i.Lifecycle != lifecycle
	})
	slices.SortFunc(insts, func(a, b Instance) int { return a.LaunchTime.Compare(b.LaunchTime) })
	if len(insts) == 0 {
		if id != "" {
			return Instance{}, fmt.Errorf("no live instance %s", id)
		}
		return Instance{}, fmt.Errorf("no live %s instance of NodePool %q", cmp.Or(lifecycle, "spot or on-demand"), nodepool)
	}
	return insts[0], nil
}

// Spot sends a Spot interruption warning for the instance (the instance terminates two minutes
// later), as the FIS action does.
func (d *Drill) Spot(ctx context.Context, inst Instance) error {
	if err := d.get(ctx, "interrupt-spot", url.Values{"instance": {inst.ID}, "queue": {d.Queue}}, nil); err != nil {
		return err
	}
	fmt.Fprintf(d.Out, "sent a Spot interruption warning for %s (NodeClaim %s) to %s; it terminates in %s\n",
		inst.ID, inst.Tags[awsv1.TagNodeClaim], d.Queue, SpotInterruptionWarningNotice)
	return nil
}

// DeadLetter is the poison-message drill: while an admission policy refuses the deletion of the
// instance's NodeClaim (a policy engine in the way, as production has them), it sends an AWS
// Health scheduled change for the instance. Capstan cannot act on it, so it leaves the message
// on the queue; SQS gives it again after each visibility timeout and, past the queue's
// maxReceiveCount, moves it to the dead-letter queue. The drill returns once it is there, and
// removes the policy whatever happens.
func (d *Drill) DeadLetter(ctx context.Context, inst Instance) (err error) {
	claim := inst.Tags[awsv1.TagNodeClaim]
	if claim == "" {
		return fmt.Errorf("instance %s has no NodeClaim tag", inst.ID)
	}
	name := "awsfake-drill-refuse-" + inst.ID
	if err := d.refuse(ctx, name, claim); err != nil {
		return err
	}
	defer func() {
		bg := context.Background()
		err = errors.Join(err,
			client.IgnoreNotFound(d.Kube.Delete(bg, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}})),
			client.IgnoreNotFound(d.Kube.Delete(bg, &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}})))
		if err == nil {
			fmt.Fprintf(d.Out, "removed the admission policy %s: NodeClaim %s may be deleted again\n", name, claim)
		}
	}()
	var sent struct{ ID string }
	if err := d.get(ctx, "send", url.Values{"queue": {d.Queue}, "event": {"scheduled-change"}, "instance": {inst.ID}}, &sent); err != nil {
		return err
	}
	fmt.Fprintf(d.Out, "sent an AWS Health scheduled change for %s (NodeClaim %s) to %s: message %s\n", inst.ID, claim, d.Queue, sent.ID)
	timeout := d.Timeout
	if timeout == 0 {
		timeout = 5 * time.Minute
	}
	poll := d.Poll
	if poll == 0 {
		poll = time.Second
	}
	seen := 0
	return wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		var onQueue, dead []QueueMessage
		if err := d.get(ctx, "messages", url.Values{"queue": {d.Queue}}, &onQueue); err != nil {
			return false, err
		}
		if err := d.get(ctx, "messages", url.Values{"queue": {d.DLQ}}, &dead); err != nil {
			return false, err
		}
		if slices.ContainsFunc(dead, func(m QueueMessage) bool { return m.ID == sent.ID }) {
			fmt.Fprintf(d.Out, "message %s is in the dead-letter queue %s after %d receives\n", sent.ID, d.DLQ, seen)
			return true, nil
		}
		i := slices.IndexFunc(onQueue, func(m QueueMessage) bool { return m.ID == sent.ID })
		if i < 0 {
			return false, fmt.Errorf("message %s left %s without reaching %s: Capstan deleted it (was the deletion refused?)", sent.ID, d.Queue, d.DLQ)
		}
		if n := onQueue[i].Receives; n > seen {
			seen = n
			fmt.Fprintf(d.Out, "message %s received %d time(s) and not deleted: it comes back after the visibility timeout\n", sent.ID, n)
		}
		return false, nil
	})
}

// refuse makes the API server refuse the deletion of the NodeClaim, and returns once a dry-run
// deletion is refused.
func (d *Drill) refuse(ctx context.Context, name, claim string) error {
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				ResourceNames: []string{claim},
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Delete},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{karpv1.Group}, APIVersions: []string{"*"}, Resources: []string{"nodeclaims"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: "false",
				Message: "the dead-letter drill refuses the deletion of NodeClaim " + claim}},
		}}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}}}
	for _, o := range []client.Object{policy, binding} {
		if err := d.Kube.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating the drill's admission policy: %w", err)
		}
	}
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: claim}}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := d.Kube.Delete(ctx, nc, client.DryRunAll)
		if apierrors.IsNotFound(err) {
			return false, fmt.Errorf("NodeClaim %s: %w", claim, err)
		}
		return err != nil && (apierrors.IsInvalid(err) || apierrors.IsForbidden(err)), nil
	}); err != nil {
		return fmt.Errorf("the API server does not refuse deleting NodeClaim %s yet: %w", claim, err)
	}
	fmt.Fprintf(d.Out, "the API server refuses to delete NodeClaim %s (admission policy %s)\n", claim, name)
	return nil
}
