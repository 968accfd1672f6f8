package aws

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/test/awsfake"
)

// eventFor waits for an event of the reason on the object, its message containing want.
func eventFor(t *testing.T, kind, name, reason, want string) {
	t.Helper()
	eventually(t, reason+" event on "+kind+" "+name+" naming "+want, time.Minute, func(ctx context.Context) (bool, error) {
		ev := &corev1.EventList{}
		if err := s.Client.List(ctx, ev, client.InNamespace(metav1.NamespaceDefault)); err != nil {
			return false, err
		}
		for _, e := range ev.Items {
			if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason && strings.Contains(e.Message, want) {
				return true, nil
			}
		}
		return false, nil
	})
}

// claimGone says whether the claim and its instance are gone.
func claimGone(name string) func(context.Context) (bool, error) {
	return func(ctx context.Context) (bool, error) {
		err := s.Client.Get(ctx, client.ObjectKey{Name: name}, &karpv1.NodeClaim{})
		return client.IgnoreNotFound(err) == nil && err != nil && len(s.aws.LiveInstances("karpenter.sh/nodeclaim", name)) == 0, nil
	}
}

// The runbook's drill as docs/aws.md walks it, with its manifests: the orders class and pool,
// the Spot drill pool and its workers; a Spot interruption acted on; a message Capstan cannot
// act on (the API server refuses its NodeClaim's deletion) received again after each visibility
// timeout and dead-lettered after maxReceiveCount; then a nodes "0" budget, which freezes
// voluntary disruption (the emptied machines stay, each told why) but not an interruption.
func TestRunbookDrill(t *testing.T) {
	manifests(t, "orders.yaml", nil)
	var workers *appsv1.Deployment
	for _, o := range manifests(t, "spot-drill.yaml", func(o client.Object) {
		if np, ok := o.(*karpv1.NodePool); ok {
			np.Spec.Disruption.ConsolidateAfter = karpv1.MustParseNillableDuration("0s")
		}
	}) {
		if d, ok := o.(*appsv1.Deployment); ok {
			workers = d
		}
	}
	eventually(t, "the Spot drill's workers Running", 2*time.Minute, running(t, "spot-drill-worker", 2))
	drill := &awsfake.Drill{Endpoint: s.aws.URL(), Queue: queue, DLQ: queue + "-dlq", Kube: s.Client, Out: tlog{t}}

	// 1. The Spot drill: the interrupted claim goes, its pods run elsewhere, the message is used.
	victim, err := drill.Instance(t.Context(), "", "spot-drill", "spot")
	if err != nil {
		t.Fatal(err)
	}
	if err := drill.Spot(t.Context(), victim); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the interrupted claim and its instance gone", 2*time.Minute, claimGone(victim.Tags["karpenter.sh/nodeclaim"]))
	eventually(t, "the workers Running again", 2*time.Minute, running(t, "spot-drill-worker", 2))
	if msgs := s.aws.Messages(queue); len(msgs) != 0 {
		t.Errorf("the Spot interruption's message is still on the queue: %+v", msgs)
	}

	// 2. The poison message: handling fails three times, then the message is dead-lettered and
	// nothing was deleted for it.
	target, err := drill.Instance(t.Context(), "", "spot-drill", "")
	if err != nil {
		t.Fatal(err)
	}
	before := len(s.aws.Messages(queue + "-dlq"))
	if err := drill.DeadLetter(t.Context(), target); err != nil {
		t.Fatal(err)
	}
	dead := s.aws.Messages(queue + "-dlq")
	if len(dead) != before+1 || !strings.Contains(dead[len(dead)-1].Body, target.ID) {
		t.Fatalf("dead-letter queue %+v: want the message about %s", dead, target.ID)
	}
	held := &karpv1.NodeClaim{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: target.Tags["karpenter.sh/nodeclaim"]}, held); err != nil || !held.DeletionTimestamp.IsZero() {
		t.Fatalf("the claim whose deletion was refused: %v, deleting %v", err, held.DeletionTimestamp)
	}

	// 3. The budget freeze: nodes "0" keeps the emptied machines (each told why) while an
	// interruption still takes one.
	np := &karpv1.NodePool{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: "spot-drill"}, np); err != nil {
		t.Fatal(err)
	}
	orig := np.DeepCopy()
	np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0"}}
	if err := s.Client.Patch(t.Context(), np, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	scaleTo(t, workers, 0)
	frozen := claims(t, "spot-drill")
	if len(frozen) == 0 {
		t.Fatal("no spot-drill claims to freeze")
	}
	for _, c := range frozen {
		eventFor(t, "NodeClaim", c.Name, "DisruptionBlocked", "budget nodes=0 for Empty")
	}
	interrupted, err := drill.Instance(t.Context(), "", "spot-drill", "spot")
	if err != nil {
		t.Fatal(err)
	}
	if err := drill.Spot(t.Context(), interrupted); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the interrupted claim gone under the freeze", 2*time.Minute, claimGone(interrupted.Tags["karpenter.sh/nodeclaim"]))
	for _, c := range frozen {
		if c.Name == interrupted.Tags["karpenter.sh/nodeclaim"] {
			continue
		}
		cur := &karpv1.NodeClaim{}
		if err := s.Client.Get(t.Context(), client.ObjectKeyFromObject(&c), cur); err != nil || !cur.DeletionTimestamp.IsZero() {
			t.Errorf("empty claim %s under a nodes \"0\" budget: %v, deleting %v", c.Name, err, cur.DeletionTimestamp)
		}
	}
}

// tlog writes the drill's lines to the test's log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
