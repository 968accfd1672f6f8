package lifecycle

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/nodeclaim/termination"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/testenv"
)

func drainEvents(rec *events.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// A claim whose launch keeps failing records why, and is deleted after LaunchTTL.
func TestFailingLaunchIsRecordedThenGivenUp(t *testing.T) {
	f := setup(t, "broken", simv1alpha1.Failures{LaunchErrors: []simv1alpha1.OfferingSelector{{}}})
	newClaim(t, "broken-1", "broken")
	nc := f.reconcile(t, "broken-1")
	cond := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeLaunched)
	if cond == nil || cond.Status != "False" || cond.Reason != "LaunchFailed" || cond.Message == "" {
		t.Fatalf("the failed launch was not saved on the claim: %+v", cond)
	}
	f.clk.Step(LaunchTTL - 2*time.Second)
	if nc := f.reconcile(t, "broken-1"); !nc.DeletionTimestamp.IsZero() {
		t.Fatal("deleted before LaunchTTL")
	}
	f.clk.Step(4 * time.Second)
	if nc := f.reconcile(t, "broken-1"); nc.DeletionTimestamp.IsZero() {
		t.Fatal("a claim that never launched was kept after LaunchTTL")
	}
	found := false
	for _, e := range drainEvents(f.ctrl.Recorder.(*events.FakeRecorder)) {
		found = found || strings.Contains(e, "LaunchTimeout")
	}
	if !found {
		t.Fatal("no LaunchTimeout event")
	}
}

// blockingCloud holds Create until released, as a slow cloud API.
type blockingCloud struct {
	cloudprovider.CloudProvider
	entered, release chan struct{}
}

func (b *blockingCloud) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	close(b.entered)
	<-b.release
	return b.CloudProvider.Create(ctx, nc)
}

// A claim deleted while its launch is in flight keeps its finalizer until the machine is known
// and terminated: nothing is left in the cloud.
func TestDeletionDuringLaunchLeavesNoMachine(t *testing.T) {
	f := setup(t, "racy", simv1alpha1.Failures{})
	newClaim(t, "racy-1", "racy")
	launches := &nodeclaims.Launches{}
	slow := &blockingCloud{CloudProvider: f.ctrl.Cloud, entered: make(chan struct{}), release: make(chan struct{})}
	f.ctrl.Cloud, f.ctrl.Launches = slow, launches
	term := &termination.Controller{Client: env.Client, Cloud: slow.CloudProvider, Clock: f.clk, Recorder: f.ctrl.Recorder, Launches: launches}

	done := make(chan error, 1)
	go func() {
		_, err := f.ctrl.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "racy-1"}})
		done <- err
	}()
	<-slow.entered
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "racy-1"}, nc); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	if _, err := term.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "racy-1"}}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "racy-1"}, nc); err != nil || !controllerutil.ContainsFinalizer(nc, karpv1.TerminationFinalizer) {
		t.Fatalf("termination let the claim go while its launch was in flight (get: %v)", err)
	}
	close(slow.release)
	if err := <-done; err != nil {
		t.Fatalf("lifecycle reconcile: %v", err)
	}
	for i := 0; i < 5; i++ {
		if _, err := term.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "racy-1"}}); err != nil {
			t.Fatal(err)
		}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "racy-1"}, nc); err != nil {
			break
		}
	}
	if n := len(f.cloud.Instances()); n != 0 {
		t.Fatalf("%d machine(s) left in the cloud after the claim was deleted mid-launch", n)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "racy-1"}, nc); err == nil {
		t.Fatal("the claim was never let go")
	}
}

// staleClient answers Gets of NodeClaims with a copy taken earlier, as an informer cache that has
// not seen the latest writes.
type staleClient struct {
	client.Client
	stale *karpv1.NodeClaim
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if nc, ok := obj.(*karpv1.NodeClaim); ok && key.Name == c.stale.Name {
		c.stale.DeepCopyInto(nc)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A status write from a stale read never erases a condition another controller wrote since.
func TestStaleReadDoesNotEraseAnotherControllersCondition(t *testing.T) {
	f := setup(t, "stale", simv1alpha1.Failures{NeverRegister: []simv1alpha1.OfferingSelector{{}}})
	newClaim(t, "stale-1", "stale")
	stale := f.reconcile(t, "stale-1") // launched; awaiting registration
	// Another controller (drift detection) records its condition.
	cur := stale.DeepCopy()
	meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeDrifted, Status: metav1.ConditionTrue, Reason: "NodePoolDrifted"})
	if err := env.Client.Status().Update(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	// The lifecycle controller reconciles from its stale copy and has a condition to write.
	stale.Status.Conditions = slices.DeleteFunc(stale.Status.Conditions, func(c metav1.Condition) bool { return c.Type == karpv1.ConditionTypeRegistered })
	f.ctrl.Client = staleClient{Client: env.Client, stale: stale}
	if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "stale-1"}}); err != nil {
		t.Fatal(err)
	}
	got := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "stale-1"}, got); err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, karpv1.ConditionTypeDrifted); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("the Drifted condition was erased by a write from a stale read: %+v", got.Status.Conditions)
	}
}

// labellingCloud adds its own labels to each launched machine, some of which clash with the
// NodePool template's.
type labellingCloud struct {
	cloudprovider.CloudProvider
	labels map[string]string
}

func (l *labellingCloud) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	created, err := l.CloudProvider.Create(ctx, nc)
	if err == nil {
		maps.Copy(created.Labels, l.labels)
	}
	return created, err
}

// Labels a user put on the NodePool template win over the labels a provider resolves; the
// provider's other labels are kept.
func TestTemplateLabelsWinOverProviderLabels(t *testing.T) {
	f := setup(t, "labels", simv1alpha1.Failures{})
	f.ctrl.Cloud = &labellingCloud{CloudProvider: f.ctrl.Cloud, labels: map[string]string{"team": "provider", "example.com/rack": "r12"}}
	newClaim(t, "labels-1", "labels")
	nc := f.reconcile(t, "labels-1")
	if got := nc.Labels["team"]; got != "orders" {
		t.Errorf("template label team = %q, want orders (the user's)", got)
	}
	if got := nc.Labels["example.com/rack"]; got != "r12" {
		t.Errorf("provider label example.com/rack = %q, want r12", got)
	}
	if got := nc.Labels[karpv1.CapacityTypeLabelKey]; got != "on-demand" {
		t.Errorf("capacity type from the claim's requirement = %q", got)
	}
}

// A claim whose NodeClass kind this provider does not serve is left alone — not launched, not
// deleted, no finalizer — and reported with one event however often it is reconciled.
func TestClaimOfAnotherProvidersKindIsLeftAlone(t *testing.T) {
	f := setup(t, "foreign", simv1alpha1.Failures{})
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "foreign-1", Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass", Name: "default"},
			Requirements: karpv1.Requirements{},
		},
	}
	if err := env.Client.Create(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	simtest.CleanupClaim(t, env.Client, nc.Name)
	for range 3 {
		got := f.reconcile(t, nc.Name)
		if !got.DeletionTimestamp.IsZero() || len(got.Finalizers) > 0 || len(got.Status.Conditions) > 0 {
			t.Fatalf("another provider's claim was touched: deleted=%v finalizers=%v conditions=%v",
				!got.DeletionTimestamp.IsZero(), got.Finalizers, conditions(got))
		}
	}
	if n := len(f.cloud.Instances()); n != 0 {
		t.Fatalf("%d machine(s) launched for another provider's claim", n)
	}
	evs := drainEvents(f.ctrl.Recorder.(*events.FakeRecorder))
	if len(evs) != 1 || !strings.Contains(evs[0], "UnmanagedNodeClass") {
		t.Fatalf("want one UnmanagedNodeClass event, got %q", evs)
	}
}

// A NodeClass that exists but is not ready — being deleted, or its Ready condition False (as
// Karpenter's regression spec "should delete a NodeClaim if it references a NodeClass that isn't
// Ready" sets it) — deletes the claim unlaunched, with a NodeClassNotReady event, as Karpenter
// does. Before, the claim waited and, with a Ready=False class, launched.
func TestNodeClassNotReadyDeletesTheClaim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		unready func(t *testing.T, snc *simv1alpha1.SimNodeClass)
	}{
		{"being deleted", func(t *testing.T, snc *simv1alpha1.SimNodeClass) {
			snc.Finalizers = []string{"example.com/hold"}
			if err := env.Client.Update(t.Context(), snc); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				got := &simv1alpha1.SimNodeClass{}
				if env.Client.Get(context.Background(), client.ObjectKey{Name: snc.Name}, got) == nil {
					got.Finalizers = nil
					_ = env.Client.Update(context.Background(), got)
				}
			})
			if err := env.Client.Delete(t.Context(), snc); err != nil {
				t.Fatal(err)
			}
		}},
		{"Ready=False", func(t *testing.T, snc *simv1alpha1.SimNodeClass) {
			meta.SetStatusCondition(&snc.Status.Conditions, metav1.Condition{Type: simv1alpha1.ConditionTypeReady, Status: metav1.ConditionFalse,
				Reason: "TestingNotReady", Message: "NodeClass is not ready"})
			if err := env.Client.Status().Update(t.Context(), snc); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "unready-" + strings.ToLower(strings.ReplaceAll(tc.name, "=", "-"))
			name = strings.ReplaceAll(name, " ", "-")
			f := setup(t, name, simv1alpha1.Failures{})
			snc := &simv1alpha1.SimNodeClass{}
			if err := env.Client.Get(t.Context(), client.ObjectKey{Name: name}, snc); err != nil {
				t.Fatal(err)
			}
			tc.unready(t, snc)
			newClaim(t, name+"-1", name)
			if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: name + "-1"}}); err != nil {
				t.Fatalf("reconcile: %v", err)
			}
			nc := &karpv1.NodeClaim{}
			err := env.Client.Get(t.Context(), client.ObjectKey{Name: name + "-1"}, nc)
			if err == nil && nc.DeletionTimestamp.IsZero() {
				t.Fatalf("the claim was kept (conditions %v) while its NodeClass is not ready", conditions(nc))
			} else if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
			if n := len(f.cloud.Instances()); n != 0 {
				t.Fatalf("%d machine(s) launched for a claim whose NodeClass is not ready", n)
			}
			evs := drainEvents(f.ctrl.Recorder.(*events.FakeRecorder))
			if !slices.ContainsFunc(evs, func(e string) bool { return strings.Contains(e, "NodeClassNotReady") }) {
				t.Fatalf("events %q lack NodeClassNotReady", evs)
			}
		})
	}
}

// The termination finalizer is added with a write locked on the version read: from a stale read,
// a finalizer another writer added since is never dropped (a merge patch writes the whole list).
func TestStaleReadKeepsAnotherWritersFinalizer(t *testing.T) {
	f := setup(t, "finalizers", simv1alpha1.Failures{})
	newClaim(t, "finalizers-1", "finalizers")
	const other = "example.com/keep"
	cur := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "finalizers-1"}, cur); err != nil {
		t.Fatal(err)
	}
	stale := cur.DeepCopy()
	patch := client.MergeFrom(cur.DeepCopy())
	controllerutil.AddFinalizer(cur, other)
	if err := env.Client.Patch(t.Context(), cur, patch); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		nc := &karpv1.NodeClaim{}
		if env.Client.Get(context.Background(), client.ObjectKey{Name: "finalizers-1"}, nc) == nil {
			patch := client.MergeFrom(nc.DeepCopy())
			controllerutil.RemoveFinalizer(nc, other)
			_ = env.Client.Patch(context.Background(), nc, patch)
		}
	})
	f.ctrl.Client = staleClient{Client: env.Client, stale: stale}
	if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "finalizers-1"}}); err != nil {
		t.Fatal(err)
	}
	f.ctrl.Client = env.Client
	got := f.reconcile(t, "finalizers-1")
	if !controllerutil.ContainsFinalizer(got, other) || !controllerutil.ContainsFinalizer(got, karpv1.TerminationFinalizer) {
		t.Fatalf("finalizers %v, want %s kept and %s added", got.Finalizers, other, karpv1.TerminationFinalizer)
	}
}

// hangingCloud never answers a launch: an endpoint that accepts the connection and says nothing.
type hangingCloud struct{ cloudprovider.CloudProvider }

func (hangingCloud) Create(ctx context.Context, _ *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A launch that never answers is cut at its deadline: the claim's Launched condition names the
// timeout, and the claim's launch is no longer in flight (its termination may go on).
func TestHungLaunchIsCutAtItsDeadline(t *testing.T) {
	f := setup(t, "hung", simv1alpha1.Failures{})
	f.ctrl.Cloud = cloudprovider.WithDeadlines(hangingCloud{f.ctrl.Cloud}, cloudprovider.Deadlines{Create: 50 * time.Millisecond})
	f.ctrl.Launches = &nodeclaims.Launches{}
	newClaim(t, "hung-1", "hung")
	nc := f.reconcile(t, "hung-1")
	cond := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeLaunched)
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != "LaunchFailed" ||
		!strings.Contains(cond.Message, "the cloud provider's Create did not answer within 50ms") {
		t.Fatalf("Launched condition %+v, want LaunchFailed naming the timeout", cond)
	}
	if f.ctrl.Launches.InFlight("hung-1") {
		t.Error("the timed-out launch is still in flight")
	}
}

// A claim holding a taint no kubelet registers with (stored before the CRDs refused it) is never
// launched: the provider refuses it as invalid, and the claim is deleted with a NodeClaimInvalid
// event naming the field, at once rather than after retrying for the launch timeout.
func TestInvalidClaimIsDeletedUnlaunched(t *testing.T) {
	f := setup(t, "invalid", simv1alpha1.Failures{})
	// The claim reads as one stored before the CRD refused shell in taint values (the API server
	// refuses to store such a claim now).
	f.ctrl.Client = &testenv.StoredBefore{Client: env.Client, Edit: func(obj client.Object) {
		if nc, ok := obj.(*karpv1.NodeClaim); ok && nc.Name == "invalid-1" {
			nc.Spec.Taints[0].Value = "x';touch /tmp/p;'"
		}
	}}
	newClaim(t, "invalid-1", "invalid")
	if _, err := f.ctrl.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "invalid-1"}}); err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	nc := &karpv1.NodeClaim{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "invalid-1"}, nc); err == nil && nc.DeletionTimestamp.IsZero() {
		t.Fatalf("the invalid claim was kept (conditions %v)", conditions(nc))
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if n := len(f.cloud.Instances()); n != 0 {
		t.Fatalf("%d machine(s) launched for an invalid claim", n)
	}
	evs := drainEvents(f.ctrl.Recorder.(*events.FakeRecorder))
	if !slices.ContainsFunc(evs, func(e string) bool {
		return strings.Contains(e, "NodeClaimInvalid") && strings.Contains(e, "spec.taints[0].value")
	}) {
		t.Fatalf("events %q lack NodeClaimInvalid naming spec.taints[0].value", evs)
	}
}
