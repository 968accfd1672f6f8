package aws_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// reservedOffering is the class's reserved offering of a reservation, if offered.
func reservedOffering(t *testing.T, f *awstest.Fixture, nc *awsv1.EC2NodeClass, id string) (cloudprovider.Offering, bool) {
	t.Helper()
	its, err := f.Provider.InstanceTypes(context.Background(), nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.ReservationID == id {
				return o, true
			}
		}
	}
	return cloudprovider.Offering{}, false
}

// pinnedClaim is a claim of the pool pinned to a reservation, as the planner writes it.
func pinnedClaim(nc *awsv1.EC2NodeClass, np *karpv1.NodePool, name, reservation, typ, zone string) *karpv1.NodeClaim {
	c := claimFor(nc, np, name, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	in := func(k, v string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: k, Operator: karpv1.NodeSelectorOpIn, Values: []string{v}}
	}
	// The pool's own capacity-type requirement is replaced by the pin.
	kept := c.Spec.Requirements[:0]
	for _, r := range c.Spec.Requirements {
		if r.Key != karpv1.CapacityTypeLabelKey {
			kept = append(kept, r)
		}
	}
	c.Spec.Requirements = append(kept, in(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeReserved),
		in(cloudprovider.ReservationIDLabelKey, reservation), in(karpv1.InstanceTypeLabelKey, typ), in(karpv1.ZoneLabelKey, zone))
	return c
}

// An EC2NodeClass's capacityReservationSelectorTerms resolve to its active reservations; each is
// offered as reserved capacity holding what other users leave of it, launched into only by a
// claim pinned to it — through a launch template targeting it, a capacity block as its own
// market — and EC2's refusal past its total makes the offering unavailable.
func TestCapacityReservationsResolveOfferAndLaunch(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	zone := f.AWS.Zones()[0].Name
	const typ = "m6i.xlarge"
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0a1", InstanceType: typ, Zone: zone, Total: 2, Interruptible: true, Tags: map[string]string{"team": "ml"}})
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0other", InstanceType: typ, Zone: zone, Total: 9, Tags: map[string]string{"team": "web"}})
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0gone", InstanceType: typ, Zone: zone, Total: 9, State: "expired", Tags: map[string]string{"team": "ml"}})
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0b2", InstanceType: typ, Zone: zone, Total: 1, Type: "capacity-block",
		EndTime: f.Clock.Now().Add(24 * time.Hour)})
	nc.Spec.CapacityReservationSelectorTerms = []awsv1.CapacityReservationSelectorTerm{{Tags: map[string]string{"team": "ml"}}, {ID: "cr-0b2"}}
	nc = resolved(t, f, nc)
	if !meta.IsStatusConditionTrue(nc.Status.Conditions, awsv1.ConditionTypeCapacityReservationsReady) {
		t.Fatalf("conditions: %+v", nc.Status.Conditions)
	}
	var ids []string
	for _, r := range nc.Status.CapacityReservations {
		ids = append(ids, r.ID+"/"+r.ReservationType)
	}
	if strings.Join(ids, ",") != "cr-0a1/default,cr-0b2/capacity-block" {
		t.Fatalf("status.capacityReservations: %v", ids)
	}
	if o, ok := reservedOffering(t, f, nc, "cr-0a1"); !ok || !o.Available || o.ReservationCapacity != 2 || o.Zone != zone || o.CapacityType != karpv1.CapacityTypeReserved {
		t.Fatalf("cr-0a1 offered as %+v (%v)", o, ok)
	}

	// Another user's instance in the reservation leaves one machine for the cluster.
	f.AWS.RunInstance(awsfake.Instance{Type: typ, Zone: zone, CapacityReservationID: "cr-0a1"})
	nc = resolvedAgain(t, f, nc)
	if o, _ := reservedOffering(t, f, nc, "cr-0a1"); o.ReservationCapacity != 1 {
		t.Fatalf("with another user's instance in it, cr-0a1 holds %d for the cluster, want 1", o.ReservationCapacity)
	}

	// An unpinned claim of the type that allows reserved capacity never launches into it.
	free := pinnedClaim(nc, np, "free", "cr-0a1", typ, zone)
	free.Spec.Requirements = slices.DeleteFunc(free.Spec.Requirements, func(r karpv1.NodeSelectorRequirementWithMinValues) bool {
		return r.Key == cloudprovider.ReservationIDLabelKey || r.Key == karpv1.CapacityTypeLabelKey
	})
	free.Spec.Requirements = append(free.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey,
		Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeReserved}})
	got, err := f.Provider.Create(ctx, free)
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[karpv1.CapacityTypeLabelKey] == karpv1.CapacityTypeReserved || f.AWS.InReservation("cr-0a1") != 1 {
		t.Fatalf("an unpinned claim launched as %s; cr-0a1 holds %d", got.Labels[karpv1.CapacityTypeLabelKey], f.AWS.InReservation("cr-0a1"))
	}

	// A pinned claim launches into it, labelled so.
	got, err = f.Provider.Create(ctx, pinnedClaim(nc, np, "held", "cr-0a1", typ, zone))
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved || got.Labels[cloudprovider.ReservationIDLabelKey] != "cr-0a1" ||
		got.Labels[cloudprovider.ReservationTypeLabelKey] != "default" || got.Labels[awsv1.LabelCapacityReservationInterruptible] != "true" ||
		f.AWS.InReservation("cr-0a1") != 2 {
		t.Fatalf("pinned launch labelled %v; cr-0a1 holds %d", got.Labels, f.AWS.InReservation("cr-0a1"))
	}
	// After a restart the claim's machine is found with the same labels.
	again, err := f.NewProvider(t, f.Clients).Create(ctx, pinnedClaim(nc, np, "held", "cr-0a1", typ, zone))
	if err != nil || again.Status.ProviderID != got.Status.ProviderID || again.Labels[cloudprovider.ReservationIDLabelKey] != "cr-0a1" ||
		again.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved {
		t.Fatalf("after a restart: %v, %v (first %s)", err, again, got.Status.ProviderID)
	}

	// Resolved again, the reservation still holds one machine for the cluster — the one its
	// claim holds (the planner subtracts the claims pinned to it).
	nc = resolvedAgain(t, f, nc)
	if o, _ := reservedOffering(t, f, nc, "cr-0a1"); o.ReservationCapacity != 1 {
		t.Fatalf("with the cluster's machine in it, cr-0a1 holds %d for the cluster's claims, want 1", o.ReservationCapacity)
	}

	// A third machine is refused by EC2; the reservation's offering turns unavailable.
	_, err = f.Provider.Create(ctx, pinnedClaim(nc, np, "over", "cr-0a1", typ, zone))
	var ice *cloudprovider.InsufficientCapacityError
	if !errors.As(err, &ice) || len(ice.Offerings) != 1 || ice.Offerings[0].ReservationID != "cr-0a1" {
		t.Fatalf("a launch past the reservation's total: %v", err)
	}
	if o, _ := reservedOffering(t, f, nc, "cr-0a1"); o.Available {
		t.Fatal("cr-0a1 still offered after EC2 refused it")
	}

	// A capacity block launches as its own market and is labelled so.
	got, err = f.Provider.Create(ctx, pinnedClaim(nc, np, "block", "cr-0b2", typ, zone))
	if err != nil {
		t.Fatal(err)
	}
	fleets := f.AWS.Requests("CreateFleet")
	if ft := fleets[len(fleets)-1].Form.Get("TargetCapacitySpecification.DefaultTargetCapacityType"); ft != "capacity-block" ||
		got.Labels[cloudprovider.ReservationTypeLabelKey] != "capacity-block" || f.AWS.InReservation("cr-0b2") != 1 {
		t.Fatalf("capacity block launched by a %q fleet, labelled %v", ft, got.Labels)
	}
}

// resolvedAgain lets the EC2NodeClass controller resolve the stored class once more.
func resolvedAgain(t *testing.T, f *awstest.Fixture, nc *awsv1.EC2NodeClass) *awsv1.EC2NodeClass {
	t.Helper()
	ctx := context.Background()
	c := &ec2nodeclass.Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	got := &awsv1.EC2NodeClass{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nc), got); err != nil {
		t.Fatal(err)
	}
	return got
}

// With the ReservedCapacity gate off, selector terms are accepted and ignored, and the class's
// condition says so.
func TestReservedCapacityGateOffIgnoresReservations(t *testing.T) {
	f := awstest.New(t, env.Client)
	f.Provider = f.NewProvider(t, f.Clients, func(o *aws.Options) { o.DisableReservedCapacity = true })
	nc, _ := f.Orders(t)
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0a1", InstanceType: "m6i.xlarge", Zone: f.AWS.Zones()[0].Name, Total: 2})
	nc.Spec.CapacityReservationSelectorTerms = []awsv1.CapacityReservationSelectorTerm{{ID: "cr-0a1"}}
	nc = resolved(t, f, nc)
	cond := meta.FindStatusCondition(nc.Status.Conditions, awsv1.ConditionTypeCapacityReservationsReady)
	if cond == nil || cond.Reason != "FeatureGateDisabled" || len(nc.Status.CapacityReservations) != 0 {
		t.Fatalf("condition %+v, reservations %v", cond, nc.Status.CapacityReservations)
	}
	if _, ok := reservedOffering(t, f, nc, "cr-0a1"); ok {
		t.Fatal("a reservation is offered with the gate off")
	}
}

// When a default reservation expires EC2 runs its instances on as on-demand, and the provider
// describes them so; a capacity block is "expiring" and offers nothing from 40 minutes before its
// end, and its end is reported for the drain.
func TestCapacityReservationEndingsOnAWS(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	zone := f.AWS.Zones()[0].Name
	const typ = "m6i.xlarge"
	end := f.Clock.Now().Add(2 * time.Hour)
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0d", InstanceType: typ, Zone: zone, Total: 1})
	f.AWS.AddCapacityReservation(awsfake.CapacityReservation{ID: "cr-0b", InstanceType: typ, Zone: zone, Total: 1, Type: "capacity-block", EndTime: end})
	nc.Spec.CapacityReservationSelectorTerms = []awsv1.CapacityReservationSelectorTerm{{ID: "cr-0d"}, {ID: "cr-0b"}}
	nc = resolved(t, f, nc)
	held, err := f.Provider.Create(ctx, pinnedClaim(nc, np, "in-default", "cr-0d", typ, zone))
	if err != nil {
		t.Fatal(err)
	}
	f.AWS.SetCapacityReservationState("cr-0d", "expired")
	machines, err := f.Provider.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		if m.Status.ProviderID == held.Status.ProviderID && (m.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeOnDemand || m.Labels[cloudprovider.ReservationIDLabelKey] != "") {
			t.Fatalf("a machine whose default reservation expired is described as %v", m.Labels)
		}
	}
	rs, err := f.Provider.Reservations(ctx)
	if err != nil || !rs["cr-0b"].End.Equal(end) || rs["cr-0b"].Type != "capacity-block" {
		t.Fatalf("reservations reported: %v, %v", rs, err)
	}
	f.Clock.Step(80*time.Minute + time.Second)
	nc = resolvedAgain(t, f, nc)
	if o, ok := reservedOffering(t, f, nc, "cr-0b"); !ok || o.Available {
		t.Fatalf("40 minutes before its end the capacity block is offered as %+v (%v)", o, ok)
	}
	if r, _ := reservationState(nc, "cr-0b"); r != "expiring" {
		t.Fatalf("the capacity block's state is %q, want expiring", r)
	}
}

func reservationState(nc *awsv1.EC2NodeClass, id string) (string, bool) {
	for _, r := range nc.Status.CapacityReservations {
		if r.ID == id {
			return r.State, true
		}
	}
	return "", false
}

// The provider-neutral core states the reservation labels and kinds itself; they are the AWS
// API's, or a reserved machine's labels would not match what EC2NodeClass users select on.
func TestNeutralReservationLabelsAreTheAWSAPIs(t *testing.T) {
	for neutral, api := range map[string]string{
		cloudprovider.ReservationIDLabelKey:            awsv1.LabelCapacityReservationID,
		cloudprovider.ReservationTypeLabelKey:          awsv1.LabelCapacityReservationType,
		cloudprovider.ReservationInterruptibleLabelKey: awsv1.LabelCapacityReservationInterruptible,
		cloudprovider.ReservationTypeDefault:           awsv1.CapacityReservationTypeDefault,
		cloudprovider.ReservationTypeCapacityBlock:     awsv1.CapacityReservationTypeCapacityBlock,
	} {
		if neutral != api {
			t.Errorf("internal/cloudprovider says %q where api/aws/v1 says %q", neutral, api)
		}
	}
}
