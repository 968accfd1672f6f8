// Package overlay evaluates NodeOverlays (karpenter.sh/v1alpha1, Karpenter's NodeOverlay gate):
// which instance types and offerings each overlay selects in each NodePool, which overlay wins
// where several select the same ones, which overlays conflict, and the adjusted instance types
// that the solver, consolidation, the cost metrics and launches then read.
//
// The rules are Karpenter v1.15's. Overlays are taken by weight, highest first (equal weights by
// name, reverse alphabetical). An overlay selects an instance type of a NodePool when the type's
// labels, with the pool's name and template labels, are compatible with its requirements, and the
// type's offerings its requirements allow (zone, capacity type). For each offering the first
// overlay that sets a price wins; for each extended resource of a type, the first that sets it
// wins. An overlay that selects an offering (or resource) that another overlay of the same weight
// already set conflicts: it is applied nowhere, and its ValidationSucceeded condition says
// Conflict. Prices are applied when read, so a priceAdjustment follows the cloud's current price.
package overlay

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// Condition types and reasons an overlay's status carries.
const (
	// ConditionValidationSucceeded is True when the overlay is valid and conflicts with none.
	ConditionValidationSucceeded = "ValidationSucceeded"
	// ConditionReady mirrors ValidationSucceeded (Karpenter's root condition).
	ConditionReady = "Ready"
	// ReasonConflict: another overlay of the same weight selects the same offering or resource.
	ReasonConflict = "Conflict"
	// ReasonRuntimeValidation: a field the API server's validation cannot check is invalid.
	ReasonRuntimeValidation = "RuntimeValidation"
	// ReasonFeatureGateDisabled: Capstan runs with the NodeOverlay gate off and applies no overlay.
	ReasonFeatureGateDisabled = "FeatureGateDisabled"
)

// Pool is a NodePool as an evaluation sees it: its name, its template's labels and its
// instance types as the cloud offers them (unadjusted).
type Pool struct {
	Name   string
	Labels map[string]string
	Types  []*cloudprovider.InstanceType
}

// Verdict is why an overlay is not applied.
type Verdict struct {
	// Reason is ReasonConflict or ReasonRuntimeValidation; Message says more.
	Reason, Message string
}

// hit is an instance type of a pool that an overlay selects, with the offerings it selects.
type hit struct {
	pool, typ string
	offers    []offer
}

// offer names an offering of an instance type.
type offer struct{ zone, capacityType string }

// change is what the overlays do to one instance type of one pool.
type change struct {
	// price is each changed offering's price or priceAdjustment, as the overlay wrote it.
	price map[offer]string
	// priceWeight is the weight of the last overlay that selected each offering's price.
	priceWeight map[offer]int32
	// capacity is the extended resources added; capacityWeight the weight that last set each.
	capacity       corev1.ResourceList
	capacityWeight map[corev1.ResourceName]int32
}

// Table is the result of an evaluation: the changes per NodePool and instance type, and the
// NodePools it evaluated. It is immutable once built.
type Table struct {
	changes   map[string]map[string]*change
	evaluated map[string]bool
}

// Evaluate applies overlays to the pools' instance types by Karpenter's rules (see the package
// comment). It returns the table and, per overlay name, why an overlay is not applied.
func Evaluate(overlays []v1alpha1.NodeOverlay, pools []Pool) (*Table, map[string]Verdict) {
	t := &Table{changes: map[string]map[string]*change{}, evaluated: map[string]bool{}}
	for _, p := range pools {
		t.evaluated[p.Name] = true
	}
	verdicts := map[string]Verdict{}
	ordered := slices.Clone(overlays)
	slices.SortStableFunc(ordered, func(a, b v1alpha1.NodeOverlay) int {
		if wa, wb := weight(&a), weight(&b); wa != wb {
			return int(wb) - int(wa)
		}
		return strings.Compare(b.Name, a.Name)
	})
	for i := range ordered {
		o := &ordered[i]
		reqs, err := Validate(o)
		if err != nil {
			verdicts[o.Name] = Verdict{Reason: ReasonRuntimeValidation, Message: err.Error()}
			continue
		}
		var hits []hit
		for _, p := range pools {
			for _, it := range p.Types {
				if offers := selected(p, it, reqs); len(offers) > 0 {
					hits = append(hits, hit{p.Name, it.Name, offers})
				}
			}
		}
		// Conflicts are looked for everywhere before anything is stored: an overlay applies
		// everywhere it selects or nowhere.
		if name, ok := t.conflict(o, hits); ok {
			verdicts[o.Name] = Verdict{Reason: ReasonConflict, Message: fmt.Sprintf("another NodeOverlay of weight %d already sets %s", weight(o), name)}
			continue
		}
		for _, h := range hits {
			t.store(o, h.pool, h.typ, h.offers)
		}
	}
	return t, verdicts
}

func weight(o *v1alpha1.NodeOverlay) int32 {
	if o.Spec.Weight == nil {
		return 0
	}
	return *o.Spec.Weight
}

// price is the overlay's price change: its price, or its priceAdjustment, or "".
func price(o *v1alpha1.NodeOverlay) string {
	switch {
	case o.Spec.Price != nil:
		return *o.Spec.Price
	case o.Spec.PriceAdjustment != nil:
		return *o.Spec.PriceAdjustment
	}
	return ""
}

// selected is the offerings of it, in pool p, that the overlay's requirements select: none when
// the type's labels (with the pool's name and template labels) are not compatible with them.
func selected(p Pool, it *cloudprovider.InstanceType, reqs requirements.Requirements) []offer {
	labels := it.Requirements.Clone()
	labels.Add(requirements.Single(karpv1.NodePoolLabelKey, p.Name))
	for k, v := range p.Labels {
		labels.Add(requirements.Single(k, v))
	}
	if labels.Compatible(reqs, nil) != nil {
		return nil
	}
	zones, zok := reqs.Get(karpv1.ZoneLabelKey)
	cts, cok := reqs.Get(karpv1.CapacityTypeLabelKey)
	var out []offer
	for _, of := range it.Offerings {
		if zok && !zones.Allows(of.Zone) || cok && !cts.Allows(of.CapacityType) {
			continue
		}
		out = append(out, offer{of.Zone, of.CapacityType})
	}
	return out
}

// conflict finds the first offering or resource among hits that an earlier overlay of the same
// weight already selected, and names it.
func (t *Table) conflict(o *v1alpha1.NodeOverlay, hits []hit) (string, bool) {
	w := weight(o)
	for _, h := range hits {
		pool, typ, offers := h.pool, h.typ, h.offers
		c := t.changes[pool][typ]
		if c == nil {
			continue
		}
		if price(o) != "" {
			for _, of := range offers {
				if pw, ok := c.priceWeight[of]; ok && pw == w {
					return fmt.Sprintf("the price of %s %s in %s (NodePool %s)", typ, of.capacityType, of.zone, pool), true
				}
			}
		}
		for name := range o.Spec.Capacity {
			if cw, ok := c.capacityWeight[name]; ok && cw == w {
				return fmt.Sprintf("the %s capacity of %s (NodePool %s)", name, typ, pool), true
			}
		}
	}
	return "", false
}

// store records the overlay's changes to one type of one pool where no heavier overlay made them.
func (t *Table) store(o *v1alpha1.NodeOverlay, pool, typ string, offers []offer) {
	if t.changes[pool] == nil {
		t.changes[pool] = map[string]*change{}
	}
	c := t.changes[pool][typ]
	if c == nil {
		c = &change{price: map[offer]string{}, priceWeight: map[offer]int32{}, capacity: corev1.ResourceList{}, capacityWeight: map[corev1.ResourceName]int32{}}
		t.changes[pool][typ] = c
	}
	w := weight(o)
	if p := price(o); p != "" {
		for _, of := range offers {
			if _, set := c.price[of]; !set {
				c.price[of] = p
			}
			c.priceWeight[of] = w
		}
	}
	for name, q := range o.Spec.Capacity {
		if _, set := c.capacity[name]; !set {
			c.capacity[name] = q.DeepCopy()
		}
		c.capacityWeight[name] = w
	}
}

// Evaluated reports whether the table evaluated the NodePool.
func (t *Table) Evaluated(pool string) bool { return t.evaluated[pool] }

// Apply returns the pool's instance types with the table's changes: a changed type is a copy
// (its offerings and capacity copied when changed), an unchanged one is shared.
func (t *Table) Apply(pool string, its []*cloudprovider.InstanceType) []*cloudprovider.InstanceType {
	changes := t.changes[pool]
	if len(changes) == 0 {
		return its
	}
	out := make([]*cloudprovider.InstanceType, len(its))
	for i, it := range its {
		out[i] = it
		c := changes[it.Name]
		if c == nil {
			continue
		}
		cp := *it
		if len(c.price) > 0 {
			cp.Offerings = slices.Clone(it.Offerings)
			for j := range cp.Offerings {
				of := &cp.Offerings[j]
				if p, ok := c.price[offer{of.Zone, of.CapacityType}]; ok {
					of.Price = AdjustPrice(of.Price, p)
				}
			}
		}
		if len(c.capacity) > 0 {
			cp.Capacity = it.Capacity.DeepCopy()
			if cp.Capacity == nil {
				cp.Capacity = corev1.ResourceList{}
			}
			for name, q := range c.capacity {
				cp.Capacity[name] = q.DeepCopy()
			}
		}
		out[i] = &cp
	}
	return out
}

// AdjustPrice applies a price or priceAdjustment as the API validated it: "0.12" is the price,
// "+0.1"/"-0.05" add to it, "+10%"/"-20%" scale it; the result is never below zero.
func AdjustPrice(p float64, change string) float64 {
	v, pct, relative, err := parseChange(change)
	if err != nil {
		return p
	}
	if !relative {
		return v
	}
	if pct {
		p *= 1 + v/100
	} else {
		p += v
	}
	return max(p, 0)
}

func parseChange(change string) (v float64, pct, relative bool, err error) {
	s := strings.TrimSpace(change)
	relative = strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-")
	pct = strings.HasSuffix(s, "%")
	v, err = strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, false, false, fmt.Errorf("%q is not a price, an amount (+0.1, -0.05) or a percentage (+10%%, -20%%)", change)
	}
	if pct && !relative {
		return 0, false, false, fmt.Errorf("%q: a percentage needs its sign (+10%%, -20%%)", change)
	}
	if pct && v < -100 {
		return 0, false, false, fmt.Errorf("%q: a price cannot fall by more than 100%%", change)
	}
	if !relative && v < 0 {
		return 0, false, false, fmt.Errorf("%q: a price cannot be negative", change)
	}
	return v, pct, relative, nil
}

// restrictedResources are the resources an overlay cannot add (the type's own measurements).
var restrictedResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage, corev1.ResourcePods}

// Validate checks what the API server's schema cannot (or what an older CRD let through) and
// returns the overlay's requirements; the error names the field and value.
func Validate(o *v1alpha1.NodeOverlay) (requirements.Requirements, error) {
	var errs []error
	if o.Spec.Price != nil && o.Spec.PriceAdjustment != nil {
		errs = append(errs, errors.New("spec: price and priceAdjustment cannot both be set"))
	}
	if o.Spec.Price != nil {
		if _, _, rel, err := parseChange(*o.Spec.Price); err != nil || rel {
			errs = append(errs, fmt.Errorf("spec.price %q: want a price such as 0.12", *o.Spec.Price))
		}
	}
	if o.Spec.PriceAdjustment != nil {
		if _, _, rel, err := parseChange(*o.Spec.PriceAdjustment); err != nil || !rel {
			errs = append(errs, fmt.Errorf("spec.priceAdjustment %q: want +0.1, -0.05, +10%% or -20%%", *o.Spec.PriceAdjustment))
		}
	}
	for name, q := range o.Spec.Capacity {
		if slices.Contains(restrictedResources, name) {
			errs = append(errs, fmt.Errorf("spec.capacity[%s]: %s cannot be overlaid (only extended resources)", name, name))
		}
		if q.Sign() < 0 {
			errs = append(errs, fmt.Errorf("spec.capacity[%s] %s: cannot be negative", name, q.String()))
		}
	}
	var reqs requirements.Requirements
	for i, r := range o.Spec.Requirements {
		field := fmt.Sprintf("spec.requirements[%d]", i)
		if msgs := validation.IsQualifiedName(r.Key); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s.key %q: %s", field, r.Key, strings.Join(msgs, "; ")))
			continue
		}
		op := requirements.Operator(r.Operator)
		if op == "" {
			op = requirements.In
		}
		if op == requirements.In || op == requirements.NotIn {
			for _, v := range r.Values {
				if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
					errs = append(errs, fmt.Errorf("%s.values %q: %s", field, v, strings.Join(msgs, "; ")))
				}
			}
		}
		req, err := requirements.New(r.Key, op, r.Values...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
			continue
		}
		reqs.Add(req)
	}
	return reqs, errors.Join(errs...)
}

// Store holds the latest table for the controllers; it is safe for concurrent use and implements
// cloudprovider.Overlays.
type Store struct {
	t atomic.Pointer[Table]
}

var _ cloudprovider.Overlays = (*Store)(nil)

// Set makes t the table every later Apply reads.
func (s *Store) Set(t *Table) { s.t.Store(t) }

// Apply implements cloudprovider.Overlays.
func (s *Store) Apply(pool string, its []*cloudprovider.InstanceType) ([]*cloudprovider.InstanceType, error) {
	t := s.t.Load()
	if t == nil || !t.Evaluated(pool) {
		return nil, &cloudprovider.OverlaysPendingError{NodePool: pool}
	}
	return t.Apply(pool, its), nil
}

// ForLaunches is the store as the cloud providers' launches read it: once any evaluation has
// run, a NodePool it did not evaluate (deleted since, or created a moment ago) launches at the
// cloud's own prices rather than not at all — its NodeClaim was planned by a decision that read
// the pool's overlays.
func (s *Store) ForLaunches() cloudprovider.Overlays { return launches{s} }

type launches struct{ s *Store }

func (l launches) Apply(pool string, its []*cloudprovider.InstanceType) ([]*cloudprovider.InstanceType, error) {
	t := l.s.t.Load()
	if t == nil {
		return nil, &cloudprovider.OverlaysPendingError{NodePool: pool}
	}
	return t.Apply(pool, its), nil
}

// Local evaluates the cluster's NodeOverlays as Capstan's controller does and returns cloud with
// their prices and capacity, for tools that read the cluster without the controller's store
// (kubectl capstan). Overlays apply only where Capstan evaluates them — its NodeOverlay gate on,
// seen from the Ready condition it writes (reason FeatureGateDisabled with the gate off);
// otherwise, or with no overlays, cloud is returned unchanged.
func Local(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider) (cloudprovider.CloudProvider, error) {
	overlays := &v1alpha1.NodeOverlayList{}
	if err := c.List(ctx, overlays); err != nil {
		if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
			return cloud, nil
		}
		return nil, fmt.Errorf("listing nodeoverlays: %w", err)
	}
	evaluated := false
	for _, o := range overlays.Items {
		c := meta.FindStatusCondition(o.Status.Conditions, ConditionReady)
		evaluated = evaluated || c != nil && c.Reason != ReasonFeatureGateDisabled
	}
	if !evaluated {
		return cloud, nil
	}
	nps := &karpv1.NodePoolList{}
	if err := c.List(ctx, nps); err != nil {
		return nil, fmt.Errorf("listing nodepools: %w", err)
	}
	pools, _ := Pools(ctx, cloud, nps.Items)
	table, _ := Evaluate(overlays.Items, pools)
	s := &Store{}
	s.Set(table)
	return cloudprovider.WithOverlays(cloud, s), nil
}

// Pools are the NodePools an evaluation covers — those cloud serves and that are not being
// deleted — with their instance types as cloud offers them; a pool whose instance types fail is
// left out, with why.
func Pools(ctx context.Context, cloud cloudprovider.CloudProvider, nps []karpv1.NodePool) ([]Pool, []error) {
	var pools []Pool
	var skipped []error
	for i := range nps {
		np := &nps[i]
		if !np.DeletionTimestamp.IsZero() || !cloudprovider.Manages(cloud, np.Spec.Template.Spec.NodeClassRef) {
			continue
		}
		its, err := cloud.GetInstanceTypes(ctx, np)
		if err != nil {
			skipped = append(skipped, fmt.Errorf("nodepool %s: %w", np.Name, err))
			continue
		}
		pools = append(pools, Pool{Name: np.Name, Labels: np.Spec.Template.ObjectMeta.Labels, Types: its})
	}
	return pools, skipped
}
