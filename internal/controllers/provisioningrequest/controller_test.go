package provisioningrequest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/controllers/provisioning"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/provreq"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// fixture is a pool of m5.xlarge machines, a namespace with a PodTemplate of 900m pods (four to a
// machine), and the controller planning through a provisioner on the simulated cloud.
type fixture struct {
	ns    string
	c     *Controller
	cloud *simtest.Cloud
}

func newFixture(t *testing.T, name string, cl client.Client) *fixture {
	t.Helper()
	return newFixtureWith(t, name, cl, cl, nil)
}

// newFixtureWith is newFixture with the provisioner reading through pcl, and the pool mutated.
func newFixtureWith(t *testing.T, name string, cl, pcl client.Client, mutate func(*karpv1.NodePool)) *fixture {
	t.Helper()
	ctx := t.Context()
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.xlarge"}}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: name}
	np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}}
	if mutate != nil {
		mutate(np)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "provreq-"}}
	for _, o := range []client.Object{snc, np, ns} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		ncs := &karpv1.NodeClaimList{}
		_ = env.Client.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: name})
		for i := range ncs.Items {
			nc := &ncs.Items[i]
			nc.Finalizers = nil
			_ = env.Client.Update(ctx, nc)
			_ = env.Client.Delete(ctx, nc)
		}
		for _, o := range []client.Object{np, snc, ns} {
			_ = env.Client.Delete(ctx, o)
		}
	})
	tmpl := &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns.Name}, Template: corev1.PodTemplateSpec{Spec: worker()}}
	if err := env.Client.Create(ctx, tmpl); err != nil {
		t.Fatal(err)
	}
	cloud := simtest.New(t, env.Client)
	p := &provisioning.Provisioner{Client: pcl, Cloud: cloud.Provider, Clock: cloud.Clock, Recorder: events.NewFakeRecorder(100)}
	return &fixture{ns: ns.Name, cloud: cloud, c: &Controller{Client: cl, APIReader: env.Client, Clock: cloud.Clock, Planner: p,
		WellKnownLabels: cloud.Provider.WellKnownLabels()}}
}

// request creates a best-effort atomic request for count workers.
func (f *fixture) request(t *testing.T, count int32, params map[string]autoscalingv1.Parameter) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	return f.submit(t, "gang", "workers", count, params)
}

// submit creates a best-effort atomic request named name for count pods of the PodTemplate tmpl.
func (f *fixture) submit(t *testing.T, name, tmpl string, count int32, params map[string]autoscalingv1.Parameter) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	pr := &autoscalingv1.ProvisioningRequest{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Spec: autoscalingv1.ProvisioningRequestSpec{
		ProvisioningClassName: autoscalingv1.ClassBestEffortAtomicScaleUp, Parameters: params,
		PodSets: []autoscalingv1.PodSet{{PodTemplateRef: autoscalingv1.Reference{Name: tmpl}, Count: count}}}}
	if err := env.Client.Create(t.Context(), pr); err != nil {
		t.Fatal(err)
	}
	return pr
}

func (f *fixture) reconcile(t *testing.T, pr *autoscalingv1.ProvisioningRequest) (reconcile.Result, *autoscalingv1.ProvisioningRequest, error) {
	t.Helper()
	res, err := f.c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)})
	cur := &autoscalingv1.ProvisioningRequest{}
	if gerr := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pr), cur); gerr != nil {
		t.Fatal(gerr)
	}
	return res, cur, err
}

// live are the request's claims not being deleted.
func live(t *testing.T, pr *autoscalingv1.ProvisioningRequest) []karpv1.NodeClaim {
	t.Helper()
	ncs := &karpv1.NodeClaimList{}
	if err := env.Client.List(t.Context(), ncs, client.MatchingLabels{provreq.RequestLabelKey: string(pr.UID)}); err != nil {
		t.Fatal(err)
	}
	var out []karpv1.NodeClaim
	for _, nc := range ncs.Items {
		if nc.DeletionTimestamp.IsZero() {
			out = append(out, nc)
		}
	}
	return out
}

// terminate finishes the deletion of the request's claims being deleted, as the termination
// controller would.
func terminate(t *testing.T, pr *autoscalingv1.ProvisioningRequest) {
	t.Helper()
	ncs := &karpv1.NodeClaimList{}
	if err := env.Client.List(t.Context(), ncs, client.MatchingLabels{provreq.RequestLabelKey: string(pr.UID)}); err != nil {
		t.Fatal(err)
	}
	for i := range ncs.Items {
		if nc := &ncs.Items[i]; !nc.DeletionTimestamp.IsZero() {
			nc.Finalizers = nil
			if err := env.Client.Update(t.Context(), nc); client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
		}
	}
}

// failingCreates fails the NodeClaim creates after the first n.
type failingCreates struct {
	client.Client
	n, made atomic.Int32
}

func (f *failingCreates) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	if _, ok := o.(*karpv1.NodeClaim); ok && f.made.Add(1) > f.n.Load() {
		return errors.New("injected: the API server refused the create")
	}
	return f.Client.Create(ctx, o, opts...)
}

// An attempt whose creates fail part way gives back the claims it made: none is left to stand for
// a part of the gang, and the request is not Provisioned.
func TestAnAttemptThatCannotCreateEveryClaimKeepsNone(t *testing.T) {
	cl := &failingCreates{Client: env.Client}
	cl.n.Store(3)
	f := newFixture(t, "provreq-create", cl)
	pr := f.request(t, 32, nil)
	_, cur, err := f.reconcile(t, pr)
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("err = %v, want the failed create", err)
	}
	if n := len(live(t, cur)); n != 0 {
		t.Fatalf("%d claims of a failed attempt left", n)
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, autoscalingv1.ConditionProvisioned); c != nil && c.Status == metav1.ConditionTrue {
		t.Fatalf("Provisioned %v", c)
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, autoscalingv1.ConditionProvisioned); c == nil || c.Reason != provreq.ReasonLaunchFailed {
		t.Fatalf("Provisioned %v, want why", c)
	}
	// The API server answers again: the next attempt, after RetryScaleUp, buys the 8.
	terminate(t, pr)
	cl.n.Store(1000)
	f.cloud.Clock.Step(RetryScaleUp)
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	if n := len(live(t, cur)); n != 8 {
		t.Fatalf("%d claims, want 8", n)
	}
}

// A claim of the attempt that goes away before every one launched (deleted for insufficient
// capacity, or by anyone) undoes the attempt: the others are given back, Provisioned says why,
// and the next attempt waits for RetryScaleUp.
func TestAClaimGoneUndoesTheAttempt(t *testing.T) {
	f := newFixture(t, "provreq-gone", env.Client)
	pr := f.request(t, 8, nil)
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	ncs := live(t, pr)
	if len(ncs) != 2 {
		t.Fatalf("%d claims, want 2", len(ncs))
	}
	gone := ncs[0]
	gone.Finalizers = nil
	if err := env.Client.Update(t.Context(), &gone); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), &gone); err != nil {
		t.Fatal(err)
	}
	res, cur, err := f.reconcile(t, pr)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, autoscalingv1.ConditionProvisioned); c == nil || c.Reason != provreq.ReasonLaunchFailed ||
		!strings.Contains(c.Message, "1 of 2 machines could not be launched") {
		t.Fatalf("Provisioned %v", c)
	}
	if n := len(live(t, pr)); n != 0 {
		t.Fatalf("%d claims left of an undone attempt", n)
	}
	if res.RequeueAfter != RetryScaleUp {
		t.Fatalf("retry after %s, want %s", res.RequeueAfter, RetryScaleUp)
	}
	// Before RetryScaleUp no new attempt; after it, one.
	if _, _, err := f.reconcile(t, pr); err != nil || len(live(t, pr)) != 0 {
		t.Fatalf("an attempt before RetryScaleUp (err %v)", err)
	}
	terminate(t, pr)
	f.cloud.Clock.Step(RetryScaleUp)
	if _, _, err := f.reconcile(t, pr); err != nil || len(live(t, pr)) != 2 {
		t.Fatalf("no new attempt after RetryScaleUp (err %v)", err)
	}
}

// ValidUntilSeconds passed, the request fails and its claims are given back; a parameter that is
// no number of seconds fails it at once, naming the parameter.
func TestValidUntilSecondsEndsTheRequest(t *testing.T) {
	f := newFixture(t, "provreq-valid", env.Client)
	pr := f.request(t, 8, map[string]autoscalingv1.Parameter{autoscalingv1.ParameterValidUntilSeconds: "60"})
	if _, _, err := f.reconcile(t, pr); err != nil || len(live(t, pr)) != 2 {
		t.Fatalf("first attempt: err %v", err)
	}
	f.cloud.Clock.SetTime(pr.CreationTimestamp.Add(61 * time.Second))
	_, cur, err := f.reconcile(t, pr)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, autoscalingv1.ConditionFailed); c == nil || c.Status != metav1.ConditionTrue || c.Reason != provreq.ReasonValidUntilExpired {
		t.Fatalf("Failed %v", c)
	}
	if n := len(live(t, pr)); n != 0 {
		t.Fatalf("%d claims left of a request that failed", n)
	}
	if err := env.Client.Delete(t.Context(), cur); err != nil {
		t.Fatal(err)
	}
	bad := f.request(t, 8, map[string]autoscalingv1.Parameter{autoscalingv1.ParameterValidUntilSeconds: "1h"})
	if _, cur, err := f.reconcile(t, bad); err != nil || !meta.IsStatusConditionTrue(cur.Status.Conditions, autoscalingv1.ConditionFailed) ||
		!strings.Contains(meta.FindStatusCondition(cur.Status.Conditions, autoscalingv1.ConditionFailed).Message, "ValidUntilSeconds") {
		t.Fatalf("err %v, conditions %v", err, cur.Status.Conditions)
	}
}

// unlisted lists no NodeClaims, as a cache that has not seen the ones just created.
type unlisted struct{ client.Client }

func (c unlisted) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*karpv1.NodeClaimList); ok {
		return nil
	}
	return c.Client.List(ctx, list, opts...)
}

// A request's claims count against the pool's limit for the provisioning pass that follows, even
// before its cache lists them: a pending pod the limit has no room left for gets no machine.
func TestARequestsClaimsCountAgainstTheLimit(t *testing.T) {
	f := newFixtureWith(t, "provreq-limit", env.Client, unlisted{env.Client}, func(np *karpv1.NodePool) {
		np.Spec.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("8")}
	})
	pr := f.request(t, 8, nil)
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	if n := len(live(t, pr)); n != 2 {
		t.Fatalf("%d claims, want 2 (8 CPU)", n)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: f.ns}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}}}
	if err := env.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable}}
	if err := env.Client.Status().Update(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	res, err := f.c.Planner.(*provisioning.Provisioner).Provision(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Created) != 0 || len(res.Plan.Unschedulable) != 1 || !strings.Contains(res.Plan.Unschedulable[0].Reason, "limits") {
		t.Fatalf("created %d claims, unschedulable %v: the request's claims must count against the limit", len(res.Created), res.Plan.Unschedulable)
	}
}

// launch marks the request's claims Launched, as the lifecycle controller would, and reconciles
// until the request is Provisioned.
func (f *fixture) launch(t *testing.T, pr *autoscalingv1.ProvisioningRequest) {
	t.Helper()
	for _, nc := range live(t, pr) {
		meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue, Reason: "Launched",
			LastTransitionTime: metav1.NewTime(f.cloud.Clock.Now())})
		if err := env.Client.Status().Update(t.Context(), &nc); err != nil {
			t.Fatal(err)
		}
	}
	if _, cur, err := f.reconcile(t, pr); err != nil || !meta.IsStatusConditionTrue(cur.Status.Conditions, autoscalingv1.ConditionProvisioned) {
		t.Fatalf("err %v, conditions %v: want Provisioned", err, cur.Status.Conditions)
	}
}

// booked counts the request's claims still booked for its pods.
func booked(t *testing.T, pr *autoscalingv1.ProvisioningRequest, now time.Time) int {
	t.Helper()
	n := 0
	for _, nc := range live(t, pr) {
		if _, ok := provreq.Booked(&nc, now); ok {
			n++
		}
	}
	return n
}

// consumer creates a pod that consumes the request, bound to a node.
func (f *fixture) consumer(t *testing.T, pr *autoscalingv1.ProvisioningRequest, name string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Annotations: map[string]string{autoscalingv1.ConsumeAnnotationKey: pr.Name}},
		Spec: corev1.PodSpec{NodeName: "a-node", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := env.Client.Create(t.Context(), p); err != nil {
		t.Fatal(err)
	}
}

// A booking ends once as many pods as the request stands for consume it and are bound: the room
// left on its machines goes to other pods and to consolidation, not held for ten minutes. The
// request stays Provisioned until BookingExpired.
func TestABookingEndsWhenItsPodsAllBound(t *testing.T) {
	f := newFixture(t, "provreq-consumed", env.Client)
	pr := f.request(t, 8, nil)
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	f.launch(t, pr)
	now := f.cloud.Clock.Now()
	if n := booked(t, pr, now); n != 2 {
		t.Fatalf("%d claims booked, want 2", n)
	}
	for i := range 7 {
		f.consumer(t, pr, fmt.Sprintf("worker-%d", i))
	}
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	if n := booked(t, pr, now); n != 2 {
		t.Fatalf("%d claims booked with 7 of 8 pods bound, want 2", n)
	}
	f.consumer(t, pr, "worker-7")
	_, cur, err := f.reconcile(t, pr)
	if err != nil {
		t.Fatal(err)
	}
	if n := booked(t, pr, now); n != 0 {
		t.Fatalf("%d claims still booked with every pod bound", n)
	}
	if !meta.IsStatusConditionTrue(cur.Status.Conditions, autoscalingv1.ConditionProvisioned) || meta.IsStatusConditionTrue(cur.Status.Conditions, autoscalingv1.ConditionBookingExpired) {
		t.Fatalf("conditions %v: want Provisioned, not yet BookingExpired", cur.Status.Conditions)
	}
}

// A deleted request's machines lose their booking at once: nobody waits for them any more.
func TestADeletedRequestsMachinesAreReleased(t *testing.T) {
	f := newFixture(t, "provreq-deleted", env.Client)
	pr := f.request(t, 8, nil)
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	f.launch(t, pr)
	if err := env.Client.Delete(t.Context(), pr); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}); err != nil {
		t.Fatal(err)
	}
	if claims, n := len(live(t, pr)), booked(t, pr, f.cloud.Clock.Now()); claims != 2 || n != 0 {
		t.Fatalf("%d claims, %d booked: want 2 machines kept, none booked", claims, n)
	}
}

// The room a check-capacity request was told of stops being kept when the booking is released:
// by its UID when its pods bound, by its name when it was deleted; other requests' stays.
func TestReleaseForgetsTheCheckedRoom(t *testing.T) {
	c := &Controller{Client: env.Client, checked: map[types.UID]placement{
		"a": {name: types.NamespacedName{Namespace: "ns", Name: "a"}},
		"b": {name: types.NamespacedName{Namespace: "ns", Name: "b"}},
		"c": {name: types.NamespacedName{Namespace: "ns", Name: "c"}},
	}}
	if err := c.release(t.Context(), types.NamespacedName{Namespace: "ns", Name: "a"}, "a"); err != nil {
		t.Fatal(err)
	}
	if err := c.release(t.Context(), types.NamespacedName{Namespace: "ns", Name: "b"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.checked["c"]; len(c.checked) != 1 || !ok {
		t.Fatalf("checked %v, want only c's room kept", c.checked)
	}
}

// createRequest creates a best-effort atomic request of count pods of a new PodTemplate.
func (f *fixture) createRequest(t *testing.T, name string, count int32, tmpl corev1.PodTemplateSpec) *autoscalingv1.ProvisioningRequest {
	t.Helper()
	if err := env.Client.Create(t.Context(), &corev1.PodTemplate{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns}, Template: tmpl}); err != nil {
		t.Fatal(err)
	}
	return f.submit(t, name, name, count, nil)
}

// worker is the fixture's pod spec: 900m and 1 GiB, four to an m5.xlarge.
func worker() corev1.PodSpec {
	return corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}}
}

// A request's pods need what their volumes demand, as pending pods do: a claim bound to a volume
// of zone-b puts the machine there though zone-a is as cheap; a claim that does not exist holds
// the request, and Provisioned says why.
func TestARequestsPodsGoWhereTheirVolumesAre(t *testing.T) {
	f := newFixture(t, "provreq-volumes", env.Client)
	ctx := t.Context()
	snc := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "provreq-volumes"}, snc); err != nil {
		t.Fatal(err)
	}
	snc.Spec.Zones = []string{"zone-a", "zone-b"}
	if err := env.Client.Update(ctx, snc); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: f.ns + "-data"}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "ebs.csi.aws.com", VolumeHandle: "vol-1"}},
		NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-b"}}}}}}},
	}}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: f.ns}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}, VolumeName: pv.Name,
		Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	for _, o := range []client.Object{pv, pvc} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pv) })
	withClaim := func(claim string) corev1.PodTemplateSpec {
		spec := worker()
		spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}}
		return corev1.PodTemplateSpec{Spec: spec}
	}
	pr := f.createRequest(t, "stateful", 4, withClaim("data"))
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	ncs := live(t, pr)
	if len(ncs) != 1 {
		t.Fatalf("%d claims, want 1", len(ncs))
	}
	if zones := zonesOf(ncs[0]); !slices.Equal(zones, []string{"zone-b"}) {
		t.Fatalf("the claim may launch in zones %v, want only the volume's zone-b", zones)
	}
	missing := f.createRequest(t, "missing", 4, withClaim("nothing"))
	_, cur, err := f.reconcile(t, missing)
	if err != nil {
		t.Fatal(err)
	}
	if c := meta.FindStatusCondition(cur.Status.Conditions, autoscalingv1.ConditionProvisioned); c == nil || c.Reason != provreq.ReasonVolumesNotReady ||
		!strings.Contains(c.Message, `persistentvolumeclaim "nothing" not found`) {
		t.Fatalf("Provisioned %v, want why the volumes hold it", c)
	}
	if n := len(live(t, missing)); n != 0 {
		t.Fatalf("%d claims bought for pods whose volume does not exist", n)
	}
}

// zonesOf are the zones a claim's requirements allow (nil: any).
func zonesOf(nc karpv1.NodeClaim) []string {
	for _, r := range nc.Spec.Requirements {
		if r.Key == corev1.LabelTopologyZone && r.Operator == karpv1.NodeSelectorOpIn {
			return r.Values
		}
	}
	return nil
}

// A request's pods get the cluster's default topology spread, as the kube-scheduler will give its
// consumers when a Service selects them: four pods spread one to a node need four machines, where
// packed they fit on one.
func TestARequestsPodsGetTheDefaultSpread(t *testing.T) {
	f := newFixture(t, "provreq-spread", env.Client)
	f.c.Planner.(*provisioning.Provisioner).DefaultSpread = &defaultspread.Applier{Reader: env.Client, Constraints: []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule}}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: f.ns}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "spread"}, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := env.Client.Create(t.Context(), svc); err != nil {
		t.Fatal(err)
	}
	pr := f.createRequest(t, "spread", 4, corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "spread"}}, Spec: worker()})
	if _, _, err := f.reconcile(t, pr); err != nil {
		t.Fatal(err)
	}
	if n := len(live(t, pr)); n != 4 {
		t.Fatalf("%d claims for four pods spread one to a node, want 4", n)
	}
}

// A request whose attempts failed and that is then deleted (or ends) before one succeeds is
// forgotten: its backoff and last attempt are dropped once past twice the longest wait, so the
// controller's memory does not grow with the requests that come and go. One that ended is
// forgotten at once.
func TestFailedAttemptsOfGoneRequestsAreForgotten(t *testing.T) {
	cl := &failingCreates{Client: env.Client} // no create allowed: the attempt fails
	f := newFixture(t, "provreq-forget", cl)
	pr := f.request(t, 8, nil)
	if _, _, err := f.reconcile(t, pr); err == nil {
		t.Fatal("the attempt did not fail")
	}
	if n := f.c.remembered(); n != 1 {
		t.Fatalf("%d requests remembered after a failed attempt, want 1", n)
	}
	terminate(t, pr)
	if err := env.Client.Delete(t.Context(), pr); err != nil {
		t.Fatal(err)
	}
	// Deleted: the next reconcile (of anything) past the horizon forgets it.
	if _, err := f.c.Reconcile(t.Context(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(pr)}); err != nil {
		t.Fatal(err)
	}
	if n := f.c.remembered(); n != 1 {
		t.Fatalf("%d remembered right after the delete, want 1 (within the backoff's horizon)", n)
	}
	f.cloud.Clock.Step(2*MaxRetryScaleUp + time.Second)
	other := f.submit(t, "other", "workers", 1, nil)
	cl.n.Store(1000)
	if _, _, err := f.reconcile(t, other); err != nil {
		t.Fatal(err)
	}
	if n := f.c.remembered(); n != 0 {
		t.Errorf("%d requests remembered past the horizon, want 0", n)
	}
	if f.c.retries.Get(string(pr.UID)) != 0 {
		t.Errorf("the deleted request's backoff is still held")
	}
}
