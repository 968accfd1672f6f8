package reservation

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim/simtest"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// launched stores a NodeClaim pinned to a reservation, launches it on the simulated cloud,
// records the launch in its status and labels, and registers its Node.
func launched(t *testing.T, sc *simtest.Cloud, name, class, reservation string) *karpv1.NodeClaim {
	t.Helper()
	ctx := t.Context()
	in := func(k, v string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: k, Operator: karpv1.NodeSelectorOpIn, Values: []string{v}}
	}
	nc := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "reserved"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: class},
			Requirements: []karpv1.NodeSelectorRequirementWithMinValues{in(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeReserved),
				in(cloudprovider.ReservationIDLabelKey, reservation), in(karpv1.InstanceTypeLabelKey, "m5.large"), in(karpv1.ZoneLabelKey, "zone-a")},
			Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		}}
	simtest.CleanupClaim(t, env.Client, name)
	got, err := sc.Provider.Create(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range got.Labels {
		nc.Labels[k] = v
	}
	if err := env.Client.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	nc.Status.ProviderID = got.Status.ProviderID
	if err := env.Client.Status().Update(ctx, nc); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: got.Labels}, Spec: corev1.NodeSpec{ProviderID: got.Status.ProviderID}}
	if err := env.Client.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	return nc
}

// A capacity block's machines are drained 40 minutes before it ends (not before), and a machine
// whose default reservation ended is labelled on-demand, with its Node.
func TestReservationEndingsAreFollowed(t *testing.T) {
	ctx := t.Context()
	sc := simtest.New(t, env.Client)
	defaultEnd := metav1.NewTime(sc.Clock.Now().Add(time.Hour))
	blockEnd := metav1.NewTime(sc.Clock.Now().Add(2 * time.Hour))
	simtest.NodeClass(t, env.Client, &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "reservation-endings"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}, CapacityReservations: []simv1alpha1.SimCapacityReservation{
			{ID: "cr-default", InstanceType: "m5.large", Zone: "zone-a", Count: 1, EndTime: &defaultEnd},
			{ID: "cr-block", InstanceType: "m5.large", Zone: "zone-a", Count: 1, ReservationType: "capacity-block", EndTime: &blockEnd},
		}}})
	odcr := launched(t, sc, "ends-default", "reservation-endings", "cr-default")
	block := launched(t, sc, "ends-block", "reservation-endings", "cr-block")
	rec := events.NewFakeRecorder(10)
	c := &Controller{Client: env.Client, Cloud: sc.Provider, Clock: sc.Clock, Recorder: rec}
	get := func(o client.Object, name string) client.Object {
		t.Helper()
		if err := env.Client.Get(ctx, client.ObjectKey{Name: name}, o); err != nil {
			t.Fatal(err)
		}
		return o
	}
	reserved := func(name string) (claim, node string) {
		t.Helper()
		nc := get(&karpv1.NodeClaim{}, name).(*karpv1.NodeClaim)
		n := get(&corev1.Node{}, name).(*corev1.Node)
		return nc.Labels[karpv1.CapacityTypeLabelKey] + "/" + nc.Labels[cloudprovider.ReservationIDLabelKey],
			n.Labels[karpv1.CapacityTypeLabelKey] + "/" + n.Labels[cloudprovider.ReservationIDLabelKey]
	}
	deleting := func(name string) bool {
		nc := &karpv1.NodeClaim{}
		err := env.Client.Get(ctx, client.ObjectKey{Name: name}, nc)
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err != nil || !nc.DeletionTimestamp.IsZero()
	}

	// 59 minutes in: both still reserved, nothing deleted.
	sc.Clock.Step(59 * time.Minute)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cl, n := reserved(odcr.Name); cl != "reserved/cr-default" || n != cl || deleting(block.Name) {
		t.Fatalf("before any end: claim %s, node %s, block deleting %v", cl, n, deleting(block.Name))
	}
	// 61 minutes: the default reservation has ended; its machine runs on as on-demand.
	sc.Clock.Step(2 * time.Minute)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if cl, n := reserved(odcr.Name); cl != "on-demand/" || n != cl {
		t.Fatalf("after the default reservation ended: claim %s, node %s", cl, n)
	}
	if deleting(block.Name) {
		t.Fatal("the capacity block's claim was deleted 59 minutes before its end")
	}
	// 80 minutes: 40 minutes before the block ends, its claim is deleted (and so drained).
	sc.Clock.Step(19 * time.Minute)
	if err := c.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !deleting(block.Name) {
		t.Fatal("the capacity block's claim is not deleted 40 minutes before its end")
	}
	if n := get(&corev1.Node{}, block.Name).(*corev1.Node); n.Labels[cloudprovider.ReservationIDLabelKey] != "cr-block" {
		t.Fatalf("the capacity block's node was relabelled %v", n.Labels)
	}
	// The offering stopped taking launches with the drain.
	its, err := sc.Provider.GetInstanceTypes(ctx, &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
		NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "reservation-endings"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.ReservationID != "" && o.Available {
				t.Fatalf("reservation %s still offered after it ended or began draining", o.ReservationID)
			}
		}
	}
}
