package aws

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

// Capacity reservations (Karpenter's ReservedCapacity). An EC2NodeClass's
// capacityReservationSelectorTerms resolve, with the class, to its active reservations
// (status.capacityReservations); each is offered to the class's NodePools as capacity type
// reserved, in its zone, at cloudprovider.ReservedPrice of the type's on-demand price, holding as
// many machines as the reservation has room for this cluster: its total less the instances of
// other users (its used count less this cluster's instances in it). The planner subtracts the
// NodeClaims pinned to it (cloudprovider.LessPinned), so the count of this cluster's machines
// in a reservation is its claims, launched or not, and survives restarts; EC2 itself refuses a
// launch past the total (ReservationCapacityExceeded), and the offering is then unavailable
// for a while, as after any insufficient capacity.

// clusterTag is the tag (value "owned") every instance of the cluster carries.
func (p *Provider) clusterTag() string { return "kubernetes.io/cluster/" + p.opts.ClusterName }

// ReservedCapacityDisabled reports whether the ReservedCapacity gate is off: classes'
// capacityReservationSelectorTerms are then ignored.
func (p *Provider) ReservedCapacityDisabled() bool { return p.opts.DisableReservedCapacity }

// ResolveCapacityReservations resolves the class's capacityReservationSelectorTerms to its
// active reservations, and records how many machines each has room for this cluster.
func (p *Provider) ResolveCapacityReservations(ctx context.Context, nc *awsv1.EC2NodeClass) ([]awsv1.CapacityReservation, error) {
	if len(nc.Spec.CapacityReservationSelectorTerms) == 0 || p.opts.DisableReservedCapacity {
		return nil, nil
	}
	fail := func(err error) error {
		return &ResolveError{Condition: awsv1.ConditionTypeCapacityReservationsReady, Reason: "CapacityReservationsNotFound", Err: err}
	}
	seen := map[string]ec2types.CapacityReservation{}
	for i, term := range nc.Spec.CapacityReservationSelectorTerms {
		pg := ec2.NewDescribeCapacityReservationsPaginator(p.clients.EC2, reservationsInput(term))
		for pg.HasMorePages() {
			page, err := pg.NextPage(ctx)
			if err != nil {
				if term.ID != "" && isCode(err, "InvalidCapacityReservationId.NotFound") {
					break // a reservation that is gone selects nothing
				}
				return nil, fail(fmt.Errorf("describing capacity reservations (spec.capacityReservationSelectorTerms[%d]): %w", i, err))
			}
			for _, r := range page.CapacityReservations {
				seen[aws.ToString(r.CapacityReservationId)] = r
			}
		}
	}
	ids := slices.Sorted(maps.Keys(seen))
	// This cluster's instances in them: their room for this cluster's claims is what others
	// leave.
	ours := map[string]int{}
	if len(ids) > 0 {
		insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
			{Name: aws.String("capacity-reservation-id"), Values: ids},
			{Name: aws.String("tag:" + p.clusterTag()), Values: []string{"owned"}},
			{Name: aws.String("instance-state-name"), Values: []string{"pending", "running"}},
		}})
		if err != nil {
			return nil, fail(fmt.Errorf("describing the cluster's instances in capacity reservations: %w", err))
		}
		for _, inst := range insts {
			ours[aws.ToString(inst.CapacityReservationId)]++
		}
	}
	out := make([]awsv1.CapacityReservation, 0, len(ids))
	room := make(map[string]int, len(ids))
	for _, id := range ids {
		var cr awsv1.CapacityReservation
		cr, room[id] = reservationStatus(seen[id], ours[id], p.clock.Now())
		out = append(out, cr)
	}
	p.rooms.record(room)
	return out, nil
}

// reservationsInput is the DescribeCapacityReservations call of one selector term: active
// reservations with the term's ID, tags, owner and match criteria.
func reservationsInput(term awsv1.CapacityReservationSelectorTerm) *ec2.DescribeCapacityReservationsInput {
	in := &ec2.DescribeCapacityReservationsInput{Filters: []ec2types.Filter{{Name: aws.String("state"), Values: []string{"active"}}}}
	if term.ID != "" {
		in.CapacityReservationIds = []string{term.ID}
	}
	in.Filters = append(in.Filters, tagFilters(term.Tags)...)
	if term.OwnerID != "" {
		in.Filters = append(in.Filters, ec2types.Filter{Name: aws.String("owner-id"), Values: []string{term.OwnerID}})
	}
	if term.InstanceMatchCriteria != "" {
		in.Filters = append(in.Filters, ec2types.Filter{Name: aws.String("instance-match-criteria"), Values: []string{term.InstanceMatchCriteria}})
	}
	return in
}

// reservationStatus is a reservation as the class's status lists it, and its room for this
// cluster: its total less the instances of other users (its used count less ours, this
// cluster's instances in it). A capacity block within CapacityBlockDrainLead of its end is
// expiring: its machines are being drained and it takes no more.
func reservationStatus(r ec2types.CapacityReservation, ours int, now time.Time) (awsv1.CapacityReservation, int) {
	total, avail := int(aws.ToInt32(r.TotalInstanceCount)), int(aws.ToInt32(r.AvailableInstanceCount))
	others := max(0, total-avail-ours)
	cr := awsv1.CapacityReservation{ID: aws.ToString(r.CapacityReservationId), AvailabilityZone: aws.ToString(r.AvailabilityZone),
		InstanceType: aws.ToString(r.InstanceType), OwnerID: aws.ToString(r.OwnerId), InstanceMatchCriteria: string(r.InstanceMatchCriteria),
		ReservationType: cloudprovider.ReservationTypeDefault, State: "active", Interruptible: aws.ToBool(r.Interruptible)}
	if r.ReservationType == ec2types.CapacityReservationTypeCapacityBlock {
		cr.ReservationType = cloudprovider.ReservationTypeCapacityBlock
	}
	if r.EndDate != nil {
		t := metav1.NewTime(*r.EndDate)
		cr.EndTime = &t
		if cr.ReservationType == cloudprovider.ReservationTypeCapacityBlock && !now.Before(r.EndDate.Add(-cloudprovider.CapacityBlockDrainLead)) {
			cr.State = "expiring"
		}
	}
	return cr, max(0, total-others)
}

// reservationRooms is the capacity reservations part's memory: how many machines each
// reservation had room for this cluster when its class was last resolved.
type reservationRooms struct {
	mu   sync.Mutex
	room map[string]int
}

// record keeps the rooms of reservations just resolved.
func (r *reservationRooms) record(room map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.room == nil {
		r.room = map[string]int{}
	}
	maps.Copy(r.room, room)
}

// of is a reservation's room, and whether it was resolved.
func (r *reservationRooms) of(id string) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, ok := r.room[id]
	return n, ok
}

// withReservations adds the class's resolved reservations to its types as reserved offerings
// (its are the caller's copies).
func (p *Provider) withReservations(nc *awsv1.EC2NodeClass, its []*cloudprovider.InstanceType) []*cloudprovider.InstanceType {
	if len(nc.Status.CapacityReservations) == 0 || p.opts.DisableReservedCapacity {
		return its
	}
	zones := map[string]bool{}
	for _, s := range nc.Status.Subnets {
		zones[s.Zone] = true
	}
	now := p.clock.Now()
	for i, it := range its {
		var more []cloudprovider.Offering
		for _, r := range nc.Status.CapacityReservations {
			room, known := p.rooms.of(r.ID)
			if r.InstanceType != it.Name || !zones[r.AvailabilityZone] || !known || r.EndTime != nil && !now.Before(r.EndTime.Time) {
				continue
			}
			if r.State == "expiring" || r.ReservationType == cloudprovider.ReservationTypeCapacityBlock && r.EndTime != nil &&
				!now.Before(r.EndTime.Add(-cloudprovider.CapacityBlockDrainLead)) {
				room = 0
			}
			od := -1.0
			for _, o := range it.Offerings {
				if o.CapacityType == karpv1.CapacityTypeOnDemand {
					od = o.Price
					break
				}
			}
			if od < 0 {
				continue
			}
			key := cloudprovider.OfferingKey{InstanceType: it.Name, Zone: r.AvailabilityZone, CapacityType: karpv1.CapacityTypeReserved, ReservationID: r.ID}
			more = append(more, cloudprovider.Offering{Zone: r.AvailabilityZone, CapacityType: karpv1.CapacityTypeReserved,
				Price: cloudprovider.ReservedPrice(od), Available: room > 0 && !p.unavailable.IsUnavailable(key),
				ReservationID: r.ID, ReservationType: r.ReservationType, ReservationCapacity: room})
		}
		if len(more) > 0 {
			its[i] = cloudprovider.WithOfferings(it, more...)
		}
	}
	return its
}

// Reservations implements cloudprovider.ReservationReporter: the EC2NodeClasses' resolved
// capacity reservations.
func (p *Provider) Reservations(ctx context.Context) (map[string]cloudprovider.Reservation, error) {
	if p.opts.DisableReservedCapacity {
		return nil, nil
	}
	list := &awsv1.EC2NodeClassList{}
	if err := p.kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing EC2NodeClasses: %w", err)
	}
	out := map[string]cloudprovider.Reservation{}
	for _, nc := range list.Items {
		for _, r := range nc.Status.CapacityReservations {
			res := cloudprovider.Reservation{Type: r.ReservationType}
			if r.EndTime != nil {
				res.End = r.EndTime.Time
			}
			out[r.ID] = res
		}
	}
	return out, nil
}

// reservationOf is the class's resolved reservation with this id.
func reservationOf(nc *awsv1.EC2NodeClass, id string) (awsv1.CapacityReservation, bool) {
	for _, r := range nc.Status.CapacityReservations {
		if r.ID == id {
			return r, true
		}
	}
	return awsv1.CapacityReservation{}, false
}

// reservationLabels labels a machine launched into a reservation.
func reservationLabels(labels map[string]string, nc *awsv1.EC2NodeClass, id string) {
	delete(labels, cloudprovider.ReservationIDLabelKey)
	if id == "" {
		return
	}
	labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeReserved
	labels[cloudprovider.ReservationIDLabelKey] = id
	t, interruptible := awsv1.CapacityReservationTypeDefault, false
	if r, ok := reservationOf(nc, id); ok {
		t, interruptible = cmp.Or(r.ReservationType, t), r.Interruptible
	}
	labels[cloudprovider.ReservationTypeLabelKey] = t
	labels[awsv1.LabelCapacityReservationInterruptible] = strconv.FormatBool(interruptible)
}
