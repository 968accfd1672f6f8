package aws

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/go-logr/logr"
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
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/requirements"
)

// Name is the AWS provider's name and provider-ID scheme.
const Name = "aws"

// MaxInstanceTypes bounds the instance types of one launch: CreateFleet takes at most this many
// overrides per template worth considering, and the cheapest are the ones the strategies pick.
const MaxInstanceTypes = 60

// Options configure the provider.
type Options struct {
	// ClusterName tags and finds the cluster's machines.
	ClusterName string
	// ClusterEndpoint and ClusterCABundle (base64 PEM) are what nodes join; ClusterCIDR the
	// service CIDR nodeadm derives cluster DNS from.
	ClusterEndpoint, ClusterCABundle, ClusterCIDR string
	// VMMemoryOverheadPercent is the share of a type's memory the hypervisor and OS keep
	// (default 0.075).
	VMMemoryOverheadPercent float64
	// InstanceTypesTTL and PricingTTL are how long instance types and prices are reused
	// (defaults 1 h and 10 min).
	InstanceTypesTTL, PricingTTL time.Duration
	// IsolatedVPC: the Pricing API is never called (it has no VPC endpoint); on-demand prices
	// are the embedded catalog's (Karpenter's isolatedVPC setting).
	IsolatedVPC bool
	// ReservedENIs are network interfaces per machine kept from the VPC CNI (Karpenter's
	// reservedENIs): a type's pods are (ENIs − ReservedENIs) × (IPv4 per ENI − 1) + 2, and
	// Capstan writes that maxPods into each machine's user data, since the image's own bootstrap
	// would count every ENI.
	ReservedENIs int
	// DisableReservedCapacity (the ReservedCapacity gate off) ignores capacity reservations.
	DisableReservedCapacity bool
	// KubernetesVersion returns the cluster's minor version ("1.37") for AMI aliases.
	KubernetesVersion func(context.Context) (string, error)
	// Log receives what the provider notices (pricing failures).
	Log logr.Logger
}

// Provider is the AWS CloudProvider.
type Provider struct {
	kube        client.Reader
	clients     *Clients
	clock       clock.PassiveClock
	unavailable *unavailable.Offerings
	opts        Options
	// overlays adjust the types a launch chooses from (NodeOverlay); nil when the gate is off.
	overlays cloudprovider.Overlays
	log      logr.Logger

	// markets are the region's instance types, offerings and prices.
	markets *markets

	// built are the instance types built for each EC2NodeClass.
	built builtCache

	// rooms is, per capacity reservation, how many machines it holds for this cluster
	// (ResolveCapacityReservations).
	rooms reservationRooms

	// templates are the launch templates launches use.
	templates *templates
}

// builtCache is the instance types part's memory: each EC2NodeClass's instance types, built
// from the market and the class's resolved status, reused until either changes.
type builtCache struct {
	mu    sync.Mutex
	types map[types.UID]builtTypes
}

// get is the class's types built under key from market version, if they are.
func (c *builtCache) get(uid types.UID, key string, version int) ([]*cloudprovider.InstanceType, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.types[uid]
	if !ok || b.key != key || b.version != version {
		return nil, false
	}
	return b.its, true
}

// put keeps the class's types built under key from market version.
func (c *builtCache) put(uid types.UID, key string, version int, its []*cloudprovider.InstanceType) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.types == nil {
		c.types = map[types.UID]builtTypes{}
	}
	c.types[uid] = builtTypes{key: key, version: version, its: its}
}

// retain drops the types of every class live does not name (deleted classes).
func (c *builtCache) retain(live func(types.UID) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid := range c.types {
		if !live(uid) {
			delete(c.types, uid)
		}
	}
}

// size counts the classes whose types are kept.
func (c *builtCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.types)
}

// ForgetClasses drops what the provider keeps for EC2NodeClasses live does not name: the
// instance types built for each class, by UID. The EC2NodeClass controller calls it when a class
// is gone, so memory does not grow with the classes that come and go.
func (p *Provider) ForgetClasses(live func(types.UID) bool) { p.built.retain(live) }

// KeptClasses counts the EC2NodeClasses whose instance types the provider keeps.
func (p *Provider) KeptClasses() int { return p.built.size() }

// builtTypes are a class's types, and what they were built from.
type builtTypes struct {
	key     string
	version int
	its     []*cloudprovider.InstanceType
}

var _ cloudprovider.CloudProvider = (*Provider)(nil)

// NewProvider returns the provider over clients, reading EC2NodeClasses through kube.
func NewProvider(kube client.Reader, clients *Clients, clk clock.PassiveClock, unavailable *unavailable.Offerings, o Options) *Provider {
	if o.VMMemoryOverheadPercent == 0 {
		o.VMMemoryOverheadPercent = 0.075
	}
	if o.InstanceTypesTTL == 0 {
		o.InstanceTypesTTL = time.Hour
	}
	if o.PricingTTL == 0 {
		o.PricingTTL = 10 * time.Minute
	}
	p := &Provider{kube: kube, clients: clients, clock: clk, unavailable: unavailable, opts: o, log: o.Log}
	p.templates = newTemplates(clients.EC2, clk, o.ClusterName)
	p.markets = newMarkets(clients, clk, o)
	return p
}

// SetOverlays makes launches choose by the NodeOverlays' prices and capacity (the gate on), as
// the decision that planned the claim did. Call it before the provider is used.
func (p *Provider) SetOverlays(o cloudprovider.Overlays) { p.overlays = o }

// Name implements CloudProvider.
func (p *Provider) Name() string { return Name }

// WellKnownLabels implements CloudProvider.
func (p *Provider) WellKnownLabels() []string { return awsv1.WellKnownLabels }

// NodeClasses implements CloudProvider: the provider serves EC2NodeClasses.
func (p *Provider) NodeClasses() []schema.GroupKind {
	return []schema.GroupKind{{Group: awsv1.Group, Kind: "EC2NodeClass"}}
}

// Clients are the provider's AWS clients.
func (p *Provider) Clients() *Clients { return p.clients }

func (p *Provider) kubeVersion(ctx context.Context) (string, error) {
	if p.opts.KubernetesVersion == nil {
		return "", errors.New("no Kubernetes version source configured")
	}
	return p.opts.KubernetesVersion(ctx)
}

// nodeClass reads a ready EC2NodeClass; one not ready gives a NodeClassNotReadyError carrying
// its Ready condition's message.
func (p *Provider) nodeClass(ctx context.Context, ref *karpv1.NodeClassReference) (*awsv1.EC2NodeClass, error) {
	if ref == nil || ref.Group != awsv1.Group || ref.Kind != "EC2NodeClass" {
		return nil, &cloudprovider.NodeClassNotReadyError{NotFound: true, Err: fmt.Errorf("nodeClassRef %v is not a %s EC2NodeClass", ref, awsv1.Group)}
	}
	nc := &awsv1.EC2NodeClass{}
	if err := p.kube.Get(ctx, client.ObjectKey{Name: ref.Name}, nc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &cloudprovider.NodeClassNotReadyError{NotFound: true, Err: fmt.Errorf("EC2NodeClass %q not found", ref.Name)}
		}
		return nil, fmt.Errorf("getting EC2NodeClass %s: %w", ref.Name, err)
	}
	if !nc.DeletionTimestamp.IsZero() {
		return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("EC2NodeClass %q is being deleted", ref.Name)}
	}
	ready := meta.FindStatusCondition(nc.Status.Conditions, awsv1.ConditionTypeReady)
	switch {
	case ready == nil:
		return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("EC2NodeClass %q is not resolved yet", ref.Name)}
	case ready.Status != metav1.ConditionTrue:
		return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("EC2NodeClass %q is not ready: %s", ref.Name, ready.Message)}
	}
	return nc, nil
}

// InstanceTypes returns what a resolved EC2NodeClass offers now.
func (p *Provider) InstanceTypes(ctx context.Context, nc *awsv1.EC2NodeClass) ([]*cloudprovider.InstanceType, error) {
	m, err := p.markets.refreshMarket(ctx)
	if err != nil {
		return nil, err
	}
	key := fmt.Sprintf("%d|%v|%v|%v", nc.Generation, nc.Status.Subnets, nc.Status.AMIs, nc.Spec.Kubelet)
	its, ok := p.built.get(nc.UID, key, m.version)
	if !ok {
		its = p.buildTypes(m, nc)
		if nc.UID != "" {
			p.built.put(nc.UID, key, m.version, its)
		}
	}
	return p.withReservations(nc, p.unavailable.Apply(its)), nil
}

// GetInstanceTypes implements CloudProvider.
func (p *Provider) GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*cloudprovider.InstanceType, error) {
	nc, err := p.nodeClass(ctx, np.Spec.Template.Spec.NodeClassRef)
	if err != nil {
		return nil, err
	}
	return p.InstanceTypes(ctx, nc)
}

// candidate is an instance type and the offerings a claim may launch it with.
type candidate struct {
	it        *cloudprovider.InstanceType
	offerings []cloudprovider.Offering
	cheapest  float64
}

// Create implements CloudProvider: one CreateFleet (instant, capacity 1) over the claim's
// cheapest compatible types in every allowed zone, after looking for an instance already
// launched for the claim (a retry or a restart must not buy a second machine).
func (p *Provider) Create(ctx context.Context, claim *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	nc, err := p.nodeClass(ctx, claim.Spec.NodeClassRef)
	if err != nil {
		return nil, err
	}
	if inst, err := p.launchedFor(ctx, claim.Name); err != nil {
		return nil, err
	} else if inst != nil {
		return p.instanceClaim(ctx, *inst, nc)
	}
	if err := cloudprovider.ValidateNodeClaim(claim); err != nil {
		return nil, err
	}
	its, err := p.InstanceTypes(ctx, nc)
	if err != nil {
		return nil, err
	}
	prioritized := false
	if p.overlays != nil {
		raw := its
		if its, err = p.overlays.Apply(claim.Labels[karpv1.NodePoolLabelKey], its); err != nil {
			return nil, err
		}
		prioritized = pricesChanged(raw, its)
	}
	reqs, err := nodepools.FromAPI(claim.Spec.Requirements)
	if err != nil {
		return nil, fmt.Errorf("NodeClaim %s requirements: %w", claim.Name, err)
	}
	cands, capacityType := candidatesFor(its, reqs, claim.Spec.Resources.Requests)
	if len(cands) == 0 {
		return nil, &cloudprovider.InsufficientCapacityError{Err: fmt.Errorf("no available offering of EC2NodeClass %s satisfies NodeClaim %s", nc.Name, claim.Name)}
	}
	return p.launch(ctx, nc, claim, cands, capacityType, prioritized)
}

// allowedBy reports whether a claim with reqs may launch an offering: available, in a zone and
// capacity type it allows, and, for a reserved offering, pinned to its reservation (the planner
// counts a reservation's machines by the claims pinned).
func allowedBy(reqs requirements.Requirements, o cloudprovider.Offering) bool {
	if !o.Available {
		return false
	}
	if z, ok := reqs.Get(karpv1.ZoneLabelKey); ok && !z.Allows(o.Zone) {
		return false
	}
	if c, ok := reqs.Get(karpv1.CapacityTypeLabelKey); ok && !c.Allows(o.CapacityType) {
		return false
	}
	if o.ReservationID != "" {
		r, ok := reqs.Get(cloudprovider.ReservationIDLabelKey)
		return ok && r.Allows(o.ReservationID)
	}
	return true
}

// candidatesFor chooses what one launch asks for: the capacity type — reserved when the claim
// allows a reserved offering, else spot when it allows an available spot one, as Karpenter
// chooses, else on-demand — and the types that satisfy reqs and hold requests with their
// offerings of that type, cheapest first, at most MaxInstanceTypes. None when nothing fits.
func candidatesFor(its []*cloudprovider.InstanceType, reqs requirements.Requirements, requests corev1.ResourceList) ([]candidate, string) {
	var cands []candidate
	spot, reserved := false, false
	for _, it := range its {
		if it.Requirements.Intersects(reqs) != nil || !it.Holds(requests) {
			continue
		}
		c := candidate{it: it}
		for _, o := range it.Offerings {
			if allowedBy(reqs, o) {
				c.offerings = append(c.offerings, o)
				spot = spot || o.CapacityType == karpv1.CapacityTypeSpot
				reserved = reserved || o.CapacityType == karpv1.CapacityTypeReserved
			}
		}
		if len(c.offerings) > 0 {
			cands = append(cands, c)
		}
	}
	capacityType := karpv1.CapacityTypeOnDemand
	switch {
	case reserved:
		capacityType = karpv1.CapacityTypeReserved
	case spot:
		capacityType = karpv1.CapacityTypeSpot
	}
	var keep []candidate
	for _, c := range cands {
		c.offerings = slices.DeleteFunc(c.offerings, func(o cloudprovider.Offering) bool { return o.CapacityType != capacityType })
		if len(c.offerings) == 0 {
			continue
		}
		c.cheapest = c.offerings[0].Price
		for _, o := range c.offerings {
			c.cheapest = min(c.cheapest, o.Price)
		}
		keep = append(keep, c)
	}
	sort.SliceStable(keep, func(i, j int) bool {
		if keep[i].cheapest != keep[j].cheapest {
			return keep[i].cheapest < keep[j].cheapest
		}
		return keep[i].it.Name < keep[j].it.Name
	})
	if len(keep) > MaxInstanceTypes {
		keep = keep[:MaxInstanceTypes]
	}
	return keep, capacityType
}

// pricesChanged reports whether overlays changed the price of any offering (Apply keeps the
// order of types and offerings).
func pricesChanged(raw, adjusted []*cloudprovider.InstanceType) bool {
	for i := range raw {
		if raw[i] == adjusted[i] {
			continue
		}
		for j := range raw[i].Offerings {
			if raw[i].Offerings[j].Price != adjusted[i].Offerings[j].Price {
				return true
			}
		}
	}
	return false
}

// subnetByZone is the class's subnet in each zone with the most free addresses (status lists
// them most-free first).
func subnetByZone(nc *awsv1.EC2NodeClass) map[string]awsv1.Subnet {
	out := map[string]awsv1.Subnet{}
	for _, s := range nc.Status.Subnets {
		if _, ok := out[s.Zone]; !ok {
			out[s.Zone] = s
		}
	}
	return out
}

// imageFor is the class's newest image serving an instance type (its architecture, and for
// alias images the variant: GPU, accelerator or standard), or "" when none does. A deprecated
// image is booted only when no current one serves the type, as Karpenter chooses.
func imageFor(nc *awsv1.EC2NodeClass, it *cloudprovider.InstanceType) string {
	labels := it.Requirements.Labels()
	deprecated := ""
	for _, ami := range nc.Status.AMIs {
		if !amifamily.Serves(ami.Requirements, labels) {
			continue
		}
		if !ami.Deprecated {
			return ami.ID
		}
		if deprecated == "" {
			deprecated = ami.ID
		}
	}
	return deprecated
}

// launch asks CreateFleet for one instance of the candidates. With prioritized (NodeOverlays
// changed prices), an on-demand fleet takes the candidates in their order — cheapest by the
// overlays' prices first — rather than by EC2's own prices; a spot fleet keeps
// price-capacity-optimized over the candidates, which are the cheapest by the overlays' prices.
func (p *Provider) launch(ctx context.Context, nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim, cands []candidate, capacityType string, prioritized bool) (*karpv1.NodeClaim, error) {
	groups, err := p.templateGroups(nc, claim, cands, capacityType, prioritized)
	if err != nil {
		return nil, err
	}
	tags := p.resourceTags(nc, claim)
	var configs []ec2types.FleetLaunchTemplateConfigRequest
	for _, g := range groups {
		if err := p.templates.ensure(ctx, g.lt, tags); err != nil {
			return nil, err
		}
		configs = append(configs, ec2types.FleetLaunchTemplateConfigRequest{
			LaunchTemplateSpecification: &ec2types.FleetLaunchTemplateSpecificationRequest{LaunchTemplateName: aws.String(g.lt.name), Version: aws.String("$Latest")},
			Overrides:                   g.overrides})
	}
	if len(configs) == 0 {
		return nil, &cloudprovider.InsufficientCapacityError{Err: fmt.Errorf("no image or subnet of EC2NodeClass %s serves the types NodeClaim %s allows", nc.Name, claim.Name)}
	}
	// A reservation's machine is an on-demand one launched into it (a capacity block's, of its
	// own market).
	reservation := ""
	if capacityType == karpv1.CapacityTypeReserved {
		reservation = cands[0].offerings[0].ReservationID
	}
	r, _ := reservationOf(nc, reservation)
	in := fleetInput(claim, configs, capacityType, r.ReservationType, prioritized, withTag(tags, NodeClaimTag, claim.Name))
	out, err := p.clients.EC2.CreateFleet(ctx, in)
	if err != nil && isCode(err, "InvalidLaunchTemplateName.NotFoundException") {
		// A template deleted behind Capstan's back: forget it; the retry recreates it.
		for _, g := range groups {
			p.templates.forget(g.lt.name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("creating fleet for NodeClaim %s: %w", claim.Name, err)
	}
	launched, ice, other := fleetOutcome(out, capacityType, reservation)
	for _, key := range ice {
		p.unavailable.MarkUnavailable(key)
	}
	if launched != nil {
		p.unavailable.MarkLaunched(cloudprovider.OfferingKey{InstanceType: launched.instanceType, Zone: launched.zone, CapacityType: capacityType, ReservationID: reservation})
		var it *cloudprovider.InstanceType
		image := ""
		if i := slices.IndexFunc(cands, func(c candidate) bool { return c.it.Name == launched.instanceType }); i >= 0 {
			it, image = cands[i].it, imageFor(nc, cands[i].it)
		}
		c := p.claimFor(launched.id, it, launched.instanceType, launched.zone, capacityType, image, p.clock.Now())
		reservationLabels(c.Labels, nc, reservation)
		return c, nil
	}
	if len(other) > 0 {
		return nil, fmt.Errorf("creating fleet for NodeClaim %s: %s", claim.Name, strings.Join(other, "; "))
	}
	return nil, &cloudprovider.InsufficientCapacityError{Offerings: ice, Err: fmt.Errorf("no capacity for %d offering(s) of NodeClaim %s", len(ice), claim.Name)}
}

// templateGroup is one launch template and the overrides (type, subnet, zone) a fleet asks it
// for.
type templateGroup struct {
	lt        *launchTemplate
	overrides []ec2types.FleetLaunchTemplateOverridesRequest
}

// templateGroups groups the candidates' offerings by the launch template each needs (its image,
// user data, reservation), in the candidates' order, with an override for each offering whose
// zone has a subnet; groups without overrides are left out. A type no image serves is skipped.
func (p *Provider) templateGroups(nc *awsv1.EC2NodeClass, claim *karpv1.NodeClaim, cands []candidate, capacityType string, prioritized bool) ([]*templateGroup, error) {
	subnets := subnetByZone(nc)
	byName := map[string]*templateGroup{}
	var groups []*templateGroup
	for rank, c := range cands {
		image := imageFor(nc, c.it)
		if image == "" {
			continue
		}
		reservation := ""
		if capacityType == karpv1.CapacityTypeReserved {
			// A pinned claim's one offering: its reservation's type and zone.
			reservation = c.offerings[0].ReservationID
		}
		lt, err := p.templateFor(nc, claim, image, c.it, reservation)
		if err != nil {
			return nil, &cloudprovider.NodeClassNotReadyError{Err: fmt.Errorf("EC2NodeClass %s: %w", nc.Name, err)}
		}
		g := byName[lt.name]
		if g == nil {
			g = &templateGroup{lt: lt}
			byName[lt.name] = g
			groups = append(groups, g)
		}
		for _, o := range c.offerings {
			sn, ok := subnets[o.Zone]
			if !ok {
				continue
			}
			ov := ec2types.FleetLaunchTemplateOverridesRequest{InstanceType: ec2types.InstanceType(c.it.Name),
				SubnetId: aws.String(sn.ID), AvailabilityZone: aws.String(sn.Zone)}
			if prioritized && capacityType == karpv1.CapacityTypeOnDemand {
				ov.Priority = aws.Float64(float64(rank))
			}
			g.overrides = append(g.overrides, ov)
		}
	}
	return slices.DeleteFunc(groups, func(g *templateGroup) bool { return len(g.overrides) == 0 }), nil
}

// fleetInput is the instant fleet of one machine for claim over configs: spot with
// price-capacity-optimized, on-demand with lowest-price (prioritized: in the overrides'
// priorities), and a reservation's machine as on-demand capacity launched into it — a capacity
// block's (reservationType capacity-block) of its own market. The claim's name is the client
// token, so a retried call launches nothing twice.
func fleetInput(claim *karpv1.NodeClaim, configs []ec2types.FleetLaunchTemplateConfigRequest, capacityType, reservationType string, prioritized bool, tags map[string]string) *ec2.CreateFleetInput {
	fleetType := ec2types.DefaultTargetCapacityType(capacityType)
	if capacityType == karpv1.CapacityTypeReserved {
		fleetType = ec2types.DefaultTargetCapacityTypeOnDemand
		if reservationType == cloudprovider.ReservationTypeCapacityBlock {
			fleetType = ec2types.DefaultTargetCapacityTypeCapacityBlock
		}
	}
	in := &ec2.CreateFleetInput{
		Type:                  ec2types.FleetTypeInstant,
		ClientToken:           aws.String(clientToken(claim)),
		LaunchTemplateConfigs: configs,
		TargetCapacitySpecification: &ec2types.TargetCapacitySpecificationRequest{TotalTargetCapacity: aws.Int32(1),
			DefaultTargetCapacityType: fleetType},
		TagSpecifications: []ec2types.TagSpecification{
			{ResourceType: ec2types.ResourceTypeInstance, Tags: ec2Tags(tags)},
			{ResourceType: ec2types.ResourceTypeVolume, Tags: ec2Tags(tags)},
			{ResourceType: ec2types.ResourceTypeFleet, Tags: ec2Tags(tags)},
		},
	}
	if capacityType == karpv1.CapacityTypeSpot {
		in.SpotOptions = &ec2types.SpotOptionsRequest{AllocationStrategy: ec2types.SpotAllocationStrategyPriceCapacityOptimized}
	} else {
		in.OnDemandOptions = &ec2types.OnDemandOptionsRequest{AllocationStrategy: ec2types.FleetOnDemandAllocationStrategyLowestPrice}
		if prioritized {
			in.OnDemandOptions.AllocationStrategy = ec2types.FleetOnDemandAllocationStrategyPrioritized
		}
	}
	return in
}

// fleetInstance is the machine a fleet launched.
type fleetInstance struct {
	id, instanceType, zone string
}

// fleetOutcome reads a fleet's answer: the machine it launched (nil when none), the offerings it
// had no capacity for, and its other errors as "code: message".
func fleetOutcome(out *ec2.CreateFleetOutput, capacityType, reservation string) (launched *fleetInstance, ice []cloudprovider.OfferingKey, other []string) {
	for _, e := range out.Errors {
		code := aws.ToString(e.ErrorCode)
		if slices.Contains(capacityErrors, code) && e.LaunchTemplateAndOverrides != nil && e.LaunchTemplateAndOverrides.Overrides != nil {
			o := e.LaunchTemplateAndOverrides.Overrides
			ice = append(ice, cloudprovider.OfferingKey{InstanceType: string(o.InstanceType), Zone: aws.ToString(o.AvailabilityZone), CapacityType: capacityType, ReservationID: reservation})
			continue
		}
		other = append(other, code+": "+aws.ToString(e.ErrorMessage))
	}
	for _, fi := range out.Instances {
		if len(fi.InstanceIds) == 0 {
			continue
		}
		launched = &fleetInstance{id: fi.InstanceIds[0], instanceType: string(fi.InstanceType)}
		if fi.LaunchTemplateAndOverrides != nil && fi.LaunchTemplateAndOverrides.Overrides != nil {
			launched.zone = aws.ToString(fi.LaunchTemplateAndOverrides.Overrides.AvailabilityZone)
		}
		break
	}
	return launched, ice, other
}

// NodeClaimTag names the NodeClaim an instance was launched for.
const NodeClaimTag = awsv1.TagNodeClaim

// withTag is m plus one key.
func withTag(m map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(m)+1)
	for a, b := range m {
		out[a] = b
	}
	out[k] = v
	return out
}

// clientToken makes CreateFleet idempotent per claim (64 characters at most).
func clientToken(claim *karpv1.NodeClaim) string {
	t := "capstan-" + claim.Name
	if claim.UID != "" {
		t = "capstan-" + string(claim.UID)
	}
	if len(t) > 64 {
		t = t[:64]
	}
	return t
}

// claimFor is the NodeClaim view of a launched instance.
func (p *Provider) claimFor(id string, it *cloudprovider.InstanceType, typeName, zone, capacityType, image string, launched time.Time) *karpv1.NodeClaim {
	nc := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, CreationTimestamp: metav1.NewTime(launched)},
		Status:     karpv1.NodeClaimStatus{ProviderID: fmt.Sprintf("aws:///%s/%s", zone, id), ImageID: image},
	}
	if it != nil {
		for k, v := range it.Requirements.Labels() {
			nc.Labels[k] = v
		}
		nc.Status.Capacity, nc.Status.Allocatable = it.Capacity.DeepCopy(), it.Allocatable()
	}
	nc.Labels[corev1.LabelInstanceTypeStable] = typeName
	nc.Labels[karpv1.ZoneLabelKey] = zone
	nc.Labels[karpv1.CapacityTypeLabelKey] = capacityType
	nc.Labels[karpv1.RegionLabelKey] = p.clients.Region
	return nc
}

// instanceClaim is the NodeClaim view of an instance found by tag (its class's types give its
// capacity).
func (p *Provider) instanceClaim(ctx context.Context, inst ec2types.Instance, nc *awsv1.EC2NodeClass) (*karpv1.NodeClaim, error) {
	typeName := string(inst.InstanceType)
	var it *cloudprovider.InstanceType
	if nc != nil {
		its, err := p.InstanceTypes(ctx, nc)
		if err != nil {
			return nil, err
		}
		for _, t := range its {
			if t.Name == typeName {
				it = t
			}
		}
	}
	ct := karpv1.CapacityTypeOnDemand
	if inst.InstanceLifecycle == ec2types.InstanceLifecycleTypeSpot {
		ct = karpv1.CapacityTypeSpot
	}
	zone := ""
	if inst.Placement != nil {
		zone = aws.ToString(inst.Placement.AvailabilityZone)
	}
	c := p.claimFor(aws.ToString(inst.InstanceId), it, typeName, zone, ct, aws.ToString(inst.ImageId), aws.ToTime(inst.LaunchTime))
	if nc != nil {
		reservationLabels(c.Labels, nc, aws.ToString(inst.CapacityReservationId))
	} else if id := aws.ToString(inst.CapacityReservationId); id != "" {
		c.Labels[karpv1.CapacityTypeLabelKey] = karpv1.CapacityTypeReserved
		c.Labels[cloudprovider.ReservationIDLabelKey] = id
	}
	c.Name = tagValue(inst.Tags, NodeClaimTag)
	if np := tagValue(inst.Tags, karpv1.NodePoolLabelKey); np != "" {
		c.Labels[karpv1.NodePoolLabelKey] = np
	}
	return c, nil
}

func tagValue(tags []ec2types.Tag, key string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}

// liveStates are the states of an instance that still exists for Capstan.
var liveStates = []string{"pending", "running", "stopping", "stopped"}

// launchedFor finds the live instance launched for a claim, if any.
func (p *Provider) launchedFor(ctx context.Context, claim string) (*ec2types.Instance, error) {
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + NodeClaimTag), Values: []string{claim}},
		{Name: aws.String("tag:kubernetes.io/cluster/" + p.opts.ClusterName), Values: []string{"owned"}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	}})
	if err != nil {
		return nil, fmt.Errorf("looking for the instance of NodeClaim %s: %w", claim, err)
	}
	if len(insts) == 0 {
		return nil, nil
	}
	return &insts[0], nil
}

func (p *Provider) describe(ctx context.Context, in *ec2.DescribeInstancesInput) ([]ec2types.Instance, error) {
	var out []ec2types.Instance
	pg := ec2.NewDescribeInstancesPaginator(p.clients.EC2, in)
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			out = append(out, r.Instances...)
		}
	}
	return out, nil
}

// instanceID parses aws:///<zone>/<id>.
func instanceID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, Name+":///")
	if !ok {
		return "", fmt.Errorf("provider ID %q is not an %s provider ID", providerID, Name)
	}
	i := strings.LastIndex(rest, "/")
	if i < 0 || !strings.HasPrefix(rest[i+1:], "i-") {
		return "", fmt.Errorf("provider ID %q has no instance ID", providerID)
	}
	return rest[i+1:], nil
}

// Get implements CloudProvider. A terminated instance is not found; one shutting down still is:
// its kubelet may still run, and the termination controller must not delete its Node (which the
// kubelet would register again) before it is gone.
func (p *Provider) Get(ctx context.Context, providerID string) (*karpv1.NodeClaim, error) {
	inst, err := p.instance(ctx, providerID)
	if err != nil {
		return nil, err
	}
	return p.instanceClaim(ctx, inst, nil)
}

// instance is the instance a provider ID names, unless it is terminated: a NodeClaimNotFoundError
// when it is not there (or the ID is not an EC2 one, as EC2 answers an unknown id).
func (p *Provider) instance(ctx context.Context, providerID string) (ec2types.Instance, error) {
	id, err := instanceID(providerID)
	if err != nil {
		return ec2types.Instance{}, &cloudprovider.NodeClaimNotFoundError{Err: err}
	}
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if isCode(err, "InvalidInstanceID.NotFound") || err == nil && (len(insts) == 0 || terminated(insts[0])) {
		return ec2types.Instance{}, &cloudprovider.NodeClaimNotFoundError{Err: fmt.Errorf("instance %s", id)}
	}
	if err != nil {
		return ec2types.Instance{}, fmt.Errorf("describing instance %s: %w", id, err)
	}
	return insts[0], nil
}

func terminated(inst ec2types.Instance) bool {
	return inst.State == nil || inst.State.Name == ec2types.InstanceStateNameTerminated
}

// List implements CloudProvider: the live instances tagged for this cluster and launched for a
// NodeClaim.
func (p *Provider) List(ctx context.Context) ([]*karpv1.NodeClaim, error) {
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag-key"), Values: []string{NodeClaimTag}},
		{Name: aws.String("tag:kubernetes.io/cluster/" + p.opts.ClusterName), Values: []string{"owned"}},
		{Name: aws.String("instance-state-name"), Values: liveStates},
	}})
	if err != nil {
		return nil, fmt.Errorf("listing instances: %w", err)
	}
	var out []*karpv1.NodeClaim
	for _, inst := range insts {
		c, err := p.instanceClaim(ctx, inst, nil)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Delete implements CloudProvider.
func (p *Provider) Delete(ctx context.Context, claim *karpv1.NodeClaim) error {
	id, err := instanceID(claim.Status.ProviderID)
	if err != nil {
		inst, lerr := p.launchedFor(ctx, claim.Name)
		if lerr != nil {
			return lerr
		}
		if inst == nil {
			return &cloudprovider.NodeClaimNotFoundError{Err: errors.New("no instance launched for the NodeClaim")}
		}
		id = aws.ToString(inst.InstanceId)
	}
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if isCode(err, "InvalidInstanceID.NotFound") || err == nil && (len(insts) == 0 || terminated(insts[0])) {
		return &cloudprovider.NodeClaimNotFoundError{Err: fmt.Errorf("instance %s", id)}
	}
	if err != nil {
		return fmt.Errorf("describing instance %s: %w", id, err)
	}
	if err := p.owned(claim, insts[0]); err != nil {
		return err
	}
	if insts[0].State.Name == ec2types.InstanceStateNameShuttingDown {
		return nil
	}
	if _, err := p.clients.EC2.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}}); err != nil {
		if isCode(err, "InvalidInstanceID.NotFound") {
			return &cloudprovider.NodeClaimNotFoundError{Err: fmt.Errorf("instance %s", id)}
		}
		return fmt.Errorf("terminating instance %s: %w", id, err)
	}
	return nil
}

// owned checks an instance's own tags against the claim that would have it terminated: this
// cluster's tag (kubernetes.io/cluster/<name>=owned), the claim's name (karpenter.sh/nodeclaim)
// and, when the claim names one, its NodePool (karpenter.sh/nodepool). A forged NodeClaim, or a
// provider ID edited to point at another machine, gets a *NotOwnedError instead.
func (p *Provider) owned(claim *karpv1.NodeClaim, inst ec2types.Instance) error {
	id := aws.ToString(inst.InstanceId)
	tag := func(k string) string { return tagValue(inst.Tags, k) }
	switch {
	case tag("kubernetes.io/cluster/"+p.opts.ClusterName) != "owned":
		return &cloudprovider.NotOwnedError{Err: fmt.Errorf("instance %s is not tagged kubernetes.io/cluster/%s=owned: it is not this cluster's", id, p.opts.ClusterName)}
	case claim.Name != "" && tag(NodeClaimTag) != claim.Name:
		return &cloudprovider.NotOwnedError{Err: fmt.Errorf("instance %s was launched for NodeClaim %q, not %q", id, tag(NodeClaimTag), claim.Name)}
	case claim.Labels[karpv1.NodePoolLabelKey] != "" && tag(karpv1.NodePoolLabelKey) != claim.Labels[karpv1.NodePoolLabelKey]:
		return &cloudprovider.NotOwnedError{Err: fmt.Errorf("instance %s belongs to NodePool %q, not %q", id, tag(karpv1.NodePoolLabelKey), claim.Labels[karpv1.NodePoolLabelKey])}
	}
	return nil
}

// CheckOwnership implements cloudprovider.OwnershipChecker: the claim's machine (by its
// provider ID) must carry this cluster's, the claim's and its NodePool's tags. A machine that no
// longer exists, or a claim without a provider ID, has nothing to protect.
func (p *Provider) CheckOwnership(ctx context.Context, claim *karpv1.NodeClaim) error {
	id, err := instanceID(claim.Status.ProviderID)
	if err != nil {
		return nil
	}
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if isCode(err, "InvalidInstanceID.NotFound") || err == nil && len(insts) == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("describing instance %s: %w", id, err)
	}
	return p.owned(claim, insts[0])
}

// Drift reasons.
const (
	DriftAMI           cloudprovider.DriftReason = "AMIDrift"
	DriftSubnet        cloudprovider.DriftReason = "SubnetDrift"
	DriftSecurityGroup cloudprovider.DriftReason = "SecurityGroupDrift"
)

// IsDrifted implements CloudProvider: an instance drifts when its image, subnet or security
// groups are no longer among what its EC2NodeClass resolves to.
func (p *Provider) IsDrifted(ctx context.Context, claim *karpv1.NodeClaim) (cloudprovider.DriftReason, error) {
	nc, err := p.nodeClass(ctx, claim.Spec.NodeClassRef)
	if err != nil {
		return "", err
	}
	id, err := instanceID(claim.Status.ProviderID)
	if err != nil {
		return "", nil
	}
	insts, err := p.describe(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil || len(insts) == 0 {
		return "", cloudprovider.IgnoreNodeClaimNotFound(err)
	}
	inst := insts[0]
	if !slices.ContainsFunc(nc.Status.AMIs, func(a awsv1.AMI) bool { return a.ID == aws.ToString(inst.ImageId) }) {
		return DriftAMI, nil
	}
	if !slices.ContainsFunc(nc.Status.Subnets, func(s awsv1.Subnet) bool { return s.ID == aws.ToString(inst.SubnetId) }) {
		return DriftSubnet, nil
	}
	if len(inst.SecurityGroups) > 0 {
		var have, want []string
		for _, g := range inst.SecurityGroups {
			have = append(have, aws.ToString(g.GroupId))
		}
		for _, g := range nc.Status.SecurityGroups {
			want = append(want, g.ID)
		}
		sort.Strings(have)
		sort.Strings(want)
		if !slices.Equal(have, want) {
			return DriftSecurityGroup, nil
		}
	}
	return "", nil
}
