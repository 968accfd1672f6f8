package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/requirements"
)

// Name is the simulated cloud's provider name and provider-ID scheme.
const Name = "sim"

// ImageID is the image every simulated machine boots.
const ImageID = "sim-image-1"

// defaultFamilies are the instance families of the Default catalog: current general purpose,
// compute and memory families on x86 and Graviton, burstables, and two GPU families.
var defaultFamilies = []string{"c5", "c6a", "c6i", "c7g", "c7i", "g4dn", "g5", "m5", "m6a", "m6i", "m7g", "m7i", "r5", "r6i", "r7g", "r7i", "t3", "t3a", "t4g"}

// Provider is the simulated cloud's CloudProvider.
type Provider struct {
	kube        client.Reader
	cloud       *Cloud
	clock       clock.PassiveClock
	catalog     []catalog.Entry
	unavailable *unavailable.Offerings
	// overlays adjust the types a launch chooses from (NodeOverlay); nil when the gate is off.
	overlays cloudprovider.Overlays
	// noReservations ignores the classes' capacity reservations (the ReservedCapacity gate off).
	noReservations bool
	// faults are the API faults injected (SetFaults); nil for none.
	faults *injector

	// built holds each SimNodeClass's instance types as of a generation (building them from
	// the catalog on every call was a tenth of Capstan's CPU during a burst).
	mu    sync.Mutex
	built map[types.UID]builtTypes
}

type builtTypes struct {
	generation int64
	// source is the resource version of the ConfigMap the types came from (instanceTypesFrom).
	source string
	its    []*cloudprovider.InstanceType
}

var _ cloudprovider.CloudProvider = (*Provider)(nil)

// NewProvider returns a provider over cloud that reads SimNodeClasses through kube.
func NewProvider(kube client.Reader, cloud *Cloud, c clock.PassiveClock, unavailable *unavailable.Offerings) (*Provider, error) {
	entries, err := catalog.Load()
	if err != nil {
		return nil, err
	}
	return &Provider{kube: kube, cloud: cloud, clock: c, catalog: entries, unavailable: unavailable}, nil
}

// SetOverlays makes launches choose by the NodeOverlays' prices and capacity (the gate on), as
// the decision that planned the claim did. Call it before the provider is used.
func (p *Provider) SetOverlays(o cloudprovider.Overlays) { p.overlays = o }

// DisableReservedCapacity makes the provider ignore SimNodeClasses' capacity reservations (the
// ReservedCapacity gate off). Call it before the provider is used.
func (p *Provider) DisableReservedCapacity() { p.noReservations = true }

// Name implements CloudProvider.
func (p *Provider) Name() string { return Name }

// WellKnownLabels implements CloudProvider: the simulated cloud's catalog is EC2's, with its
// instance-type labels.
func (p *Provider) WellKnownLabels() []string { return wellKnownLabels }

// wellKnownLabels are EC2's instance-type labels and those of Karpenter's kwok provider (for
// catalogs read with instanceTypesFrom).
var wellKnownLabels = append(slices.Clone(awsv1.WellKnownLabels), catalog.KWOKLabels...)

// NodeClasses implements CloudProvider: the simulated cloud serves SimNodeClasses.
func (p *Provider) NodeClasses() []schema.GroupKind {
	return []schema.GroupKind{{Group: simv1alpha1.Group, Kind: simv1alpha1.SimNodeClassKind}}
}

// Cloud is the simulated cloud behind the provider.
func (p *Provider) Cloud() *Cloud { return p.cloud }

func (p *Provider) nodeClass(ctx context.Context, ref *karpv1.NodeClassReference) (*simv1alpha1.SimNodeClass, error) {
	if ref == nil || ref.Group != simv1alpha1.Group || ref.Kind != simv1alpha1.SimNodeClassKind {
		return nil, &cloudprovider.NodeClassNotReadyError{NotFound: true, Err: fmt.Errorf("nodeClassRef %v is not a %s SimNodeClass", ref, simv1alpha1.Group)}
	}
	snc := &simv1alpha1.SimNodeClass{}
	if err := p.kube.Get(ctx, client.ObjectKey{Name: ref.Name}, snc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &cloudprovider.NodeClassNotReadyError{NotFound: true, Err: fmt.Errorf("SimNodeClass %q not found", ref.Name)}
		}
		return nil, fmt.Errorf("getting SimNodeClass %s: %w", ref.Name, err)
	}
	if !snc.DeletionTimestamp.IsZero() {
		return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("SimNodeClass %q is being deleted", ref.Name)}
	}
	return snc, nil
}

// readyNodeClass is nodeClass for what launches: a class whose Ready condition is False (its
// instance types cannot be resolved, or an operator says so) gives a NodeClassNotReadyError with
// the condition's message. A class with no Ready condition yet is ready: nothing needs resolving
// before a simulated launch.
func (p *Provider) readyNodeClass(ctx context.Context, ref *karpv1.NodeClassReference) (*simv1alpha1.SimNodeClass, error) {
	snc, err := p.nodeClass(ctx, ref)
	if err != nil {
		return nil, err
	}
	if c := meta.FindStatusCondition(snc.Status.Conditions, simv1alpha1.ConditionTypeReady); c != nil && c.Status == metav1.ConditionFalse {
		return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("SimNodeClass %q is not ready: %s: %s", ref.Name, c.Reason, c.Message)}
	}
	return snc, nil
}

// InstanceTypes returns what a SimNodeClass offers, with offerings in its zones. A class whose
// instanceTypesFrom cannot be read or parsed gets a NodeClassNotReadyError naming the ConfigMap,
// the entry and the field.
func (p *Provider) InstanceTypes(ctx context.Context, snc *simv1alpha1.SimNodeClass) ([]*cloudprovider.InstanceType, error) {
	var source *corev1.ConfigMap
	if from := snc.Spec.InstanceTypesFrom; from != nil {
		ref := from.ConfigMap
		source = &corev1.ConfigMap{}
		if err := p.kube.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, source); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("instanceTypesFrom: ConfigMap %s/%s not found", ref.Namespace, ref.Name)}
			}
			return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", ref.Namespace, ref.Name, err)
		}
	}
	version := ""
	if source != nil {
		version = source.ResourceVersion
	}
	p.mu.Lock()
	b, ok := p.built[snc.UID]
	p.mu.Unlock()
	if !ok || b.generation != snc.Generation || b.source != version || snc.UID == "" {
		its, err := p.build(snc, source)
		if err != nil {
			return nil, err
		}
		b = builtTypes{generation: snc.Generation, source: version, its: its}
		if snc.UID != "" {
			p.mu.Lock()
			if p.built == nil {
				p.built = map[types.UID]builtTypes{}
			}
			p.built[snc.UID] = b
			p.mu.Unlock()
		}
	}
	// Each caller gets its own types and offerings: availability changes from call to call.
	its := p.unavailable.Apply(b.its)
	if len(snc.Spec.CapacityReservations) > 0 {
		// A reservation past its end takes no launches.
		now := p.clock.Now()
		for _, it := range its {
			for j := range it.Offerings {
				o := &it.Offerings[j]
				if r, ok := reservation(snc.Spec, o.ReservationID); ok && ended(r, now) {
					o.Available = false
				}
			}
		}
	}
	return its, nil
}

// build computes a SimNodeClass's instance types from the catalog (or the ConfigMap source),
// with its price overrides.
func (p *Provider) build(snc *simv1alpha1.SimNodeClass, source *corev1.ConfigMap) ([]*cloudprovider.InstanceType, error) {
	spec := snc.Spec
	if source != nil {
		its, err := fromConfigMap(spec, source)
		if err != nil {
			return nil, &cloudprovider.NodeClassNotReadyError{Err: err}
		}
		overridePrices(spec, its)
		if p.noReservations {
			return its, nil
		}
		return withReservations(spec, its), nil
	}
	zones := spec.Zones
	if len(zones) == 0 {
		zones = []string{"zone-a", "zone-b", "zone-c"}
	}
	lo, hi := float64(spec.SpotPrice.MinPercent)/100, float64(spec.SpotPrice.MaxPercent)/100
	if lo == 0 && hi == 0 {
		lo, hi = 0.30, 0.45
	}
	var entries []catalog.Entry
	for _, e := range p.catalog {
		if len(spec.InstanceTypes) > 0 {
			if !slices.Contains(spec.InstanceTypes, e.Name) {
				continue
			}
		} else if spec.Catalog != simv1alpha1.CatalogFull && !slices.Contains(defaultFamilies, e.Labels[awsv1.LabelInstanceFamily]) {
			continue
		}
		entries = append(entries, e)
	}
	opts := catalog.Options{Zones: zones, Spot: true, SpotFraction: catalog.StableSpotFraction(lo, hi)}
	if k := spec.Kubelet; k != nil {
		opts.MaxPods, opts.PodsPerCore = k.MaxPods, k.PodsPerCore
	}
	its, err := catalog.InstanceTypes(entries, opts)
	if err != nil {
		return nil, err
	}
	overridePrices(spec, its)
	if p.noReservations {
		return its, nil
	}
	return withReservations(spec, its), nil
}

// withReservations adds each capacity reservation of the spec to its type as a reserved
// offering in its zone, at cloudprovider.ReservedPrice of the type's on-demand price there; a
// reservation of a type or zone the class does not offer adds nothing.
func withReservations(spec simv1alpha1.SimNodeClassSpec, its []*cloudprovider.InstanceType) []*cloudprovider.InstanceType {
	for i, it := range its {
		var more []cloudprovider.Offering
		for _, r := range spec.CapacityReservations {
			if r.InstanceType != it.Name {
				continue
			}
			for _, o := range it.Offerings {
				if o.Zone == r.Zone && o.CapacityType == karpv1.CapacityTypeOnDemand {
					more = append(more, cloudprovider.Offering{Zone: r.Zone, CapacityType: karpv1.CapacityTypeReserved,
						Price: cloudprovider.ReservedPrice(o.Price), Available: true, ReservationID: r.ID,
						ReservationType: reservationType(r), ReservationCapacity: int(r.Count)})
					break
				}
			}
		}
		if len(more) > 0 {
			its[i] = cloudprovider.WithOfferings(it, more...)
		}
	}
	return its
}

func reservationType(r simv1alpha1.SimCapacityReservation) string {
	if r.ReservationType == "" {
		return awsv1.CapacityReservationTypeDefault
	}
	return r.ReservationType
}

// ended reports whether a reservation takes no more launches: past its end, or for a capacity
// block from cloudprovider.CapacityBlockDrainLead before it.
func ended(r simv1alpha1.SimCapacityReservation, now time.Time) bool {
	if r.EndTime == nil {
		return false
	}
	end := r.EndTime.Time
	if reservationType(r) == awsv1.CapacityReservationTypeCapacityBlock {
		end = end.Add(-cloudprovider.CapacityBlockDrainLead)
	}
	return !now.Before(end)
}

// Reservations implements cloudprovider.ReservationReporter: the SimNodeClasses' capacity
// reservations.
func (p *Provider) Reservations(ctx context.Context) (map[string]cloudprovider.Reservation, error) {
	if p.noReservations {
		return nil, nil
	}
	list := &simv1alpha1.SimNodeClassList{}
	if err := p.kube.List(ctx, list); err != nil {
		return nil, fmt.Errorf("listing SimNodeClasses: %w", err)
	}
	out := map[string]cloudprovider.Reservation{}
	for _, snc := range list.Items {
		for _, r := range snc.Spec.CapacityReservations {
			res := cloudprovider.Reservation{Type: reservationType(r)}
			if r.EndTime != nil {
				res.End = r.EndTime.Time
			}
			out[r.ID] = res
		}
	}
	return out, nil
}

// asTheCloudSees labels a machine as the cloud would describe it now: one launched into a
// default reservation that has ended (or that its class no longer lists) runs on as on-demand,
// as EC2 moves such an instance.
func (p *Provider) asTheCloudSees(ctx context.Context, inst *Instance, nc *karpv1.NodeClaim, classes map[string]*simv1alpha1.SimNodeClass) {
	if inst.ReservationID == "" {
		return
	}
	snc, ok := classes[inst.NodeClass]
	if !ok {
		snc = &simv1alpha1.SimNodeClass{}
		if err := p.kube.Get(ctx, client.ObjectKey{Name: inst.NodeClass}, snc); err != nil {
			snc = nil // a class that cannot be read changes nothing
		}
		classes[inst.NodeClass] = snc
	}
	if snc == nil {
		return
	}
	r, ok := reservation(snc.Spec, inst.ReservationID)
	if ok && (reservationType(r) != awsv1.CapacityReservationTypeDefault || r.EndTime == nil || p.clock.Now().Before(r.EndTime.Time)) {
		return
	}
	nc.Labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeOnDemand
	delete(nc.Labels, cloudprovider.ReservationIDLabelKey)
	delete(nc.Labels, cloudprovider.ReservationTypeLabelKey)
}

// reservation is the spec's capacity reservation with this id.
func reservation(spec simv1alpha1.SimNodeClassSpec, id string) (simv1alpha1.SimCapacityReservation, bool) {
	for _, r := range spec.CapacityReservations {
		if r.ID == id {
			return r, true
		}
	}
	return simv1alpha1.SimCapacityReservation{}, false
}

// fromConfigMap reads the instance types of an instanceTypesFrom ConfigMap, narrowed by
// spec.instanceTypes.
func fromConfigMap(spec simv1alpha1.SimNodeClassSpec, cm *corev1.ConfigMap) ([]*cloudprovider.InstanceType, error) {
	ref := spec.InstanceTypesFrom.ConfigMap
	key := ref.Key
	if key == "" {
		key = "instance_types.json"
	}
	data, ok := cm.Data[key]
	if !ok {
		b, bin := cm.BinaryData[key]
		if !bin {
			return nil, fmt.Errorf("instanceTypesFrom: ConfigMap %s/%s has no key %q", ref.Namespace, ref.Name, key)
		}
		data = string(b)
	}
	its, err := catalog.ParseKWOK([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("instanceTypesFrom: ConfigMap %s/%s key %s: %w", ref.Namespace, ref.Name, key, err)
	}
	if len(spec.InstanceTypes) > 0 {
		its = slices.DeleteFunc(its, func(it *cloudprovider.InstanceType) bool { return !slices.Contains(spec.InstanceTypes, it.Name) })
		if len(its) == 0 {
			return nil, fmt.Errorf("instanceTypesFrom: ConfigMap %s/%s key %s has none of spec.instanceTypes", ref.Namespace, ref.Name, key)
		}
	}
	return its, nil
}

// overridePrices applies spec.priceOverrides.
func overridePrices(spec simv1alpha1.SimNodeClassSpec, its []*cloudprovider.InstanceType) {
	for _, it := range its {
		for i := range it.Offerings {
			o := &it.Offerings[i]
			for _, po := range spec.PriceOverrides {
				if matches(po.OfferingSelector, it.Name, o.Zone, o.CapacityType) {
					if v, err := strconv.ParseFloat(po.Price, 64); err == nil {
						o.Price = v
					}
				}
			}
		}
	}
}

func matches(s simv1alpha1.OfferingSelector, it, zone, ct string) bool {
	return (s.InstanceType == "" || s.InstanceType == it) && (s.Zone == "" || s.Zone == zone) && (s.CapacityType == "" || s.CapacityType == ct)
}

func anyMatch(sels []simv1alpha1.OfferingSelector, it, zone, ct string) bool {
	return slices.ContainsFunc(sels, func(s simv1alpha1.OfferingSelector) bool { return matches(s, it, zone, ct) })
}

// GetInstanceTypes implements CloudProvider.
func (p *Provider) GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*cloudprovider.InstanceType, error) {
	snc, err := p.readyNodeClass(ctx, np.Spec.Template.Spec.NodeClassRef)
	if err != nil {
		return nil, err
	}
	return p.InstanceTypes(ctx, snc)
}

type candidate struct {
	it *cloudprovider.InstanceType
	o  cloudprovider.Offering
}

// Create implements CloudProvider: it launches the cheapest offering the claim's requirements
// and requests allow, skipping offerings with injected insufficient capacity.
func (p *Provider) Create(ctx context.Context, nc *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	after, err := p.before(ctx, "Create")
	if err != nil {
		return nil, err
	}
	if err := p.cloud.Load(); err != nil {
		return nil, err
	}
	if inst, ok := p.cloud.existing(nc.Name); ok {
		if err := after(); err != nil {
			return nil, err
		}
		return p.toNodeClaim(inst), nil
	}
	if err := cloudprovider.ValidateNodeClaim(nc); err != nil {
		return nil, err
	}
	snc, err := p.readyNodeClass(ctx, nc.Spec.NodeClassRef)
	if err != nil {
		return nil, err
	}
	its, err := p.InstanceTypes(ctx, snc)
	if err != nil {
		return nil, err
	}
	// The cloud bills its own prices; overlays only change which offering is cheapest.
	bills := map[cloudprovider.OfferingKey]float64{}
	if p.overlays != nil {
		for _, it := range its {
			for _, o := range it.Offerings {
				bills[cloudprovider.OfferingKey{InstanceType: it.Name, Zone: o.Zone, CapacityType: o.CapacityType, ReservationID: o.ReservationID}] = o.Price
			}
		}
		if its, err = p.overlays.Apply(nc.Labels[karpv1.NodePoolLabelKey], its); err != nil {
			return nil, err
		}
	}
	reqs, err := nodepools.FromAPI(nc.Spec.Requirements)
	if err != nil {
		return nil, fmt.Errorf("NodeClaim %s requirements: %w", nc.Name, err)
	}
	cands := candidates(its, reqs, nc.Spec.Resources.Requests)
	var ice []cloudprovider.OfferingKey
	for _, c := range cands {
		key := cloudprovider.OfferingKey{InstanceType: c.it.Name, Zone: c.o.Zone, CapacityType: c.o.CapacityType, ReservationID: c.o.ReservationID}
		if anyMatch(snc.Spec.Failures.InsufficientCapacity, key.InstanceType, key.Zone, key.CapacityType) {
			ice = append(ice, key)
			p.unavailable.MarkUnavailable(key)
			continue
		}
		if anyMatch(snc.Spec.Failures.LaunchErrors, key.InstanceType, key.Zone, key.CapacityType) {
			return nil, fmt.Errorf("launching %s in %s: injected launch error", key.InstanceType, key.Zone)
		}
		never := anyMatch(snc.Spec.Failures.NeverRegister, key.InstanceType, key.Zone, key.CapacityType)
		if bill, ok := bills[key]; ok {
			c.o.Price = bill
		}
		inst, err := p.cloud.launch(nc.Name, capacities(snc.Spec.Failures.Shortages, c), func(id string) *Instance {
			return p.newInstance(id, nc, snc, c, never)
		})
		if errors.Is(err, errFull) {
			ice = append(ice, key)
			p.unavailable.MarkUnavailable(key)
			continue
		}
		if err != nil {
			return nil, err
		}
		p.unavailable.MarkLaunched(key)
		if err := after(); err != nil {
			return nil, err
		}
		return p.toNodeClaim(inst), nil
	}
	if len(ice) > 0 {
		return nil, &cloudprovider.InsufficientCapacityError{Offerings: ice, Err: fmt.Errorf("no capacity for %d offering(s) of NodeClaim %s", len(ice), nc.Name)}
	}
	return nil, &cloudprovider.InsufficientCapacityError{Err: fmt.Errorf("no instance type of SimNodeClass %s satisfies NodeClaim %s", snc.Name, nc.Name)}
}

// capacities are the bounds a launch of the candidate must fit: its capacity reservation's
// count, and the machines each shortage selecting its offering leaves.
func capacities(shortages []simv1alpha1.OfferingShortage, c candidate) []capacity {
	var caps []capacity
	if id := c.o.ReservationID; id != "" {
		caps = append(caps, capacity{in: func(inst *Instance) bool { return inst.ReservationID == id }, max: c.o.ReservationCapacity})
	}
	for _, s := range shortages {
		if matches(s.OfferingSelector, c.it.Name, c.o.Zone, c.o.CapacityType) {
			caps = append(caps, capacity{max: int(s.Machines), in: func(inst *Instance) bool {
				return inst.InstanceType == c.it.Name && inst.Zone == c.o.Zone && inst.CapacityType == c.o.CapacityType && inst.ReservationID == c.o.ReservationID
			}})
		}
	}
	return caps
}

// candidates are the available offerings of the types that satisfy reqs and hold requests,
// cheapest first. A reserved offering is one only for a claim pinned to its reservation: the
// planner counts a reservation's slots by the claims pinned.
func candidates(its []*cloudprovider.InstanceType, reqs requirements.Requirements, requests corev1.ResourceList) []candidate {
	var cands []candidate
	for _, it := range its {
		if it.Requirements.Intersects(reqs) != nil || !it.Holds(requests) {
			continue
		}
		for _, o := range it.Offerings {
			if !o.Available {
				continue
			}
			if z, ok := reqs.Get(karpv1.ZoneLabelKey); ok && !z.Allows(o.Zone) {
				continue
			}
			if c, ok := reqs.Get(karpv1.CapacityTypeLabelKey); ok && !c.Allows(o.CapacityType) {
				continue
			}
			if o.ReservationID != "" {
				if r, ok := reqs.Get(cloudprovider.ReservationIDLabelKey); !ok || !r.Allows(o.ReservationID) {
					continue
				}
			}
			cands = append(cands, candidate{it, o})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].o.Price != cands[j].o.Price {
			return cands[i].o.Price < cands[j].o.Price
		}
		return cands[i].it.Name < cands[j].it.Name
	})
	return cands
}

func (p *Provider) newInstance(id string, nc *karpv1.NodeClaim, snc *simv1alpha1.SimNodeClass, c candidate, never bool) *Instance {
	now := p.clock.Now()
	launch, register := time.Second, 2*time.Second
	if d := snc.Spec.LaunchDelay; d != nil {
		launch = d.Duration
	}
	if d := snc.Spec.RegistrationDelay; d != nil {
		register = d.Duration
	}
	labels := c.it.Requirements.Labels()
	labels[karpv1.ZoneLabelKey] = c.o.Zone
	labels[karpv1.CapacityTypeLabelKey] = c.o.CapacityType
	labels[karpv1.RegionLabelKey] = "sim-region-1"
	delete(labels, cloudprovider.ReservationIDLabelKey)
	if c.o.ReservationID != "" {
		labels[cloudprovider.ReservationIDLabelKey] = c.o.ReservationID
		labels[cloudprovider.ReservationTypeLabelKey] = c.o.ReservationType
	}
	inst := &Instance{
		ID: id, NodeClaim: nc.Name, NodeClass: snc.Name, InstanceType: c.it.Name, Zone: c.o.Zone,
		CapacityType: c.o.CapacityType, Price: c.o.Price, ImageID: ImageID, Labels: labels, ReservationID: c.o.ReservationID,
		Capacity: c.it.Capacity.DeepCopy(), Allocatable: c.it.Allocatable(), LaunchedAt: now,
	}
	if !never {
		inst.RegisterAt = now.Add(launch + register)
	}
	return inst
}

func (p *Provider) toNodeClaim(inst *Instance) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: inst.NodeClaim, Labels: map[string]string{}, CreationTimestamp: metav1.NewTime(inst.LaunchedAt)},
		Status: karpv1.NodeClaimStatus{
			ProviderID: inst.ProviderID(), ImageID: inst.ImageID,
			Capacity: inst.Capacity.DeepCopy(), Allocatable: inst.Allocatable.DeepCopy(),
		},
	}
	for k, v := range inst.Labels {
		nc.Labels[k] = v
	}
	return nc
}

// instanceID parses sim:///<zone>/<id>.
func instanceID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, Name+":///")
	if !ok {
		return "", fmt.Errorf("provider ID %q is not a %s provider ID", providerID, Name)
	}
	i := strings.LastIndex(rest, "/")
	if i < 0 || i == len(rest)-1 {
		return "", fmt.Errorf("provider ID %q has no instance ID", providerID)
	}
	return rest[i+1:], nil
}

// Get implements CloudProvider.
func (p *Provider) Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error) {
	if _, err := p.before(ctx, "Get"); err != nil {
		return nil, err
	}
	id, err := instanceID(providerID)
	if err != nil {
		// Not this cloud's provider ID: it names no machine here (as EC2 answers an unknown id).
		return nil, &cloudprovider.NodeClaimNotFoundError{Err: err}
	}
	if err := p.cloud.Load(); err != nil {
		return nil, err
	}
	inst, ok := p.cloud.Get(id)
	if !ok {
		return nil, &cloudprovider.NodeClaimNotFoundError{Err: fmt.Errorf("instance %s", id)}
	}
	nc := p.toNodeClaim(inst)
	p.asTheCloudSees(ctx, inst, nc, map[string]*simv1alpha1.SimNodeClass{})
	return nc, nil
}

// List implements CloudProvider.
func (p *Provider) List(ctx context.Context) ([]*karpv1.NodeClaim, error) {
	if _, err := p.before(ctx, "List"); err != nil {
		return nil, err
	}
	if err := p.cloud.Load(); err != nil {
		return nil, err
	}
	var out []*karpv1.NodeClaim
	classes := map[string]*simv1alpha1.SimNodeClass{}
	for _, inst := range p.cloud.Instances() {
		nc := p.toNodeClaim(inst)
		p.asTheCloudSees(ctx, inst, nc, classes)
		out = append(out, nc)
	}
	return out, nil
}

// Delete implements CloudProvider.
func (p *Provider) Delete(ctx context.Context, nc *karpv1.NodeClaim) error {
	if _, err := p.before(ctx, "Delete"); err != nil {
		return err
	}
	if err := p.cloud.Load(); err != nil {
		return err
	}
	id, err := instanceID(nc.Status.ProviderID)
	if err != nil {
		if inst, ok := p.cloud.existing(nc.Name); ok {
			id = inst.ID
		} else {
			return &cloudprovider.NodeClaimNotFoundError{Err: errors.New("no instance launched for the NodeClaim")}
		}
	}
	if inst, ok := p.cloud.Get(id); ok && inst.NodeClaim != "" && nc.Name != "" && inst.NodeClaim != nc.Name {
		return &cloudprovider.NotOwnedError{Err: fmt.Errorf("machine %s was launched for NodeClaim %q, not %q", id, inst.NodeClaim, nc.Name)}
	}
	existed, err := p.cloud.Terminate(id)
	if err != nil {
		return err
	}
	if !existed {
		return &cloudprovider.NodeClaimNotFoundError{Err: fmt.Errorf("instance %s", id)}
	}
	return nil
}

// CheckOwnership implements cloudprovider.OwnershipChecker: the claim's machine must have been
// launched for it (a forged NodeClaim, or one whose provider ID was edited, names another's).
func (p *Provider) CheckOwnership(_ context.Context, nc *karpv1.NodeClaim) error {
	if err := p.cloud.Load(); err != nil {
		return err
	}
	id, err := instanceID(nc.Status.ProviderID)
	if err != nil {
		return nil
	}
	if inst, ok := p.cloud.Get(id); ok && inst.NodeClaim != "" && inst.NodeClaim != nc.Name {
		return &cloudprovider.NotOwnedError{Err: fmt.Errorf("machine %s was launched for NodeClaim %q, not %q", id, inst.NodeClaim, nc.Name)}
	}
	return nil
}

// IsDrifted implements CloudProvider: a machine drifts when its SimNodeClass no longer offers its
// instance type, or not in its zone — judged against the class's instance types as they are
// resolved (spec.zones and spec.instanceTypes, or the menu of instanceTypesFrom, whose zones are
// its own).
func (p *Provider) IsDrifted(ctx context.Context, nc *karpv1.NodeClaim) (cloudprovider.DriftReason, error) {
	snc, err := p.nodeClass(ctx, nc.Spec.NodeClassRef)
	if err != nil {
		return "", err
	}
	itName, zone := nc.Labels[karpv1.InstanceTypeLabelKey], nc.Labels[karpv1.ZoneLabelKey]
	if itName == "" {
		return "", nil
	}
	its, err := p.InstanceTypes(ctx, snc)
	if err != nil {
		return "", err
	}
	for _, it := range its {
		if it.Name != itName {
			continue
		}
		if zone == "" || slices.ContainsFunc(it.Offerings, func(o cloudprovider.Offering) bool { return o.Zone == zone }) {
			return "", nil
		}
		return "ZoneNotOffered", nil
	}
	return "InstanceTypeNotOffered", nil
}
