// Package defaultspread applies the cluster's kube-scheduler default topology spread constraints
// (its PodTopologySpread plugin's defaultConstraints, given to Capstan as SCHEDULER_CONFIG, as to
// Karpenter v1.15) to the pods Capstan plans, as the kube-scheduler will apply them: to a pod
// without topology spread constraints of its own, with a label selector deduced from the Services
// that select the pod and from its ReplicationController, ReplicaSet or StatefulSet. Capstan then
// buys the machines the scheduler will spread the pods over.
package defaultspread

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"
)

// Config is the part of the kube-scheduler's configuration Capstan mirrors, in Karpenter v1.15's
// SCHEDULER_CONFIG shape: podTopologySpread.defaultConstraints.
type Config struct {
	PodTopologySpread *PodTopologySpread `json:"podTopologySpread,omitempty"`
}

// PodTopologySpread mirrors the kube-scheduler's PodTopologySpread plugin arguments.
type PodTopologySpread struct {
	// DefaultConstraints apply to pods without topology spread constraints of their own. As in
	// the kube-scheduler they carry no labelSelector: each pod's is deduced.
	DefaultConstraints []corev1.TopologySpreadConstraint `json:"defaultConstraints,omitempty"`
}

// Parse reads a SCHEDULER_CONFIG document (YAML or JSON); empty is no configuration. Unknown
// fields and constraints the kube-scheduler would refuse are errors naming the field.
func Parse(raw string) (*Config, error) {
	if strings.TrimSpace(raw) == "" {
		return nil, nil
	}
	c := &Config{}
	if err := yaml.UnmarshalStrict([]byte(raw), c); err != nil {
		return nil, fmt.Errorf("not a scheduler configuration (podTopologySpread.defaultConstraints): %w", err)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate applies the kube-scheduler's rules for default constraints.
func (c *Config) Validate() error {
	if c == nil || c.PodTopologySpread == nil {
		return nil
	}
	cs := c.PodTopologySpread.DefaultConstraints
	for i, tsc := range cs {
		field := fmt.Sprintf("podTopologySpread.defaultConstraints[%d]", i)
		switch {
		case tsc.MaxSkew <= 0:
			return fmt.Errorf("%s.maxSkew %d: must be greater than 0", field, tsc.MaxSkew)
		case tsc.TopologyKey == "":
			return fmt.Errorf("%s.topologyKey: must be set", field)
		case len(validation.IsQualifiedName(tsc.TopologyKey)) > 0:
			return fmt.Errorf("%s.topologyKey %q: not a label key: %s", field, tsc.TopologyKey, strings.Join(validation.IsQualifiedName(tsc.TopologyKey), "; "))
		case tsc.WhenUnsatisfiable != corev1.DoNotSchedule && tsc.WhenUnsatisfiable != corev1.ScheduleAnyway:
			return fmt.Errorf("%s.whenUnsatisfiable %q: must be DoNotSchedule or ScheduleAnyway", field, tsc.WhenUnsatisfiable)
		case tsc.LabelSelector != nil:
			return fmt.Errorf("%s.labelSelector: must not be set, the selector is deduced for each pod (as the kube-scheduler does)", field)
		case len(tsc.MatchLabelKeys) > 0:
			return fmt.Errorf("%s.matchLabelKeys: must not be set, the kube-scheduler ignores it on default constraints", field)
		}
		for j := range i {
			if cs[j].TopologyKey == tsc.TopologyKey && cs[j].WhenUnsatisfiable == tsc.WhenUnsatisfiable {
				return fmt.Errorf("%s: repeats defaultConstraints[%d] (topologyKey %s, whenUnsatisfiable %s)", field, j, tsc.TopologyKey, tsc.WhenUnsatisfiable)
			}
		}
	}
	return nil
}

// Constraints are the configured default constraints (none without a configuration).
func (c *Config) Constraints() []corev1.TopologySpreadConstraint {
	if c == nil || c.PodTopologySpread == nil {
		return nil
	}
	return c.PodTopologySpread.DefaultConstraints
}

// Applier gives pods the default constraints. The zero value of Constraints applies nothing.
type Applier struct {
	Reader      client.Reader
	Constraints []corev1.TopologySpreadConstraint
}

// Apply returns pods with the default constraints on each pod that has none of its own and whose
// selector can be deduced; those pods are copies (the others are returned as they are, so pods
// read from a cache are never written). Services and owners are read once per call.
func (a *Applier) Apply(ctx context.Context, pods []*corev1.Pod) []*corev1.Pod {
	if a == nil || len(a.Constraints) == 0 {
		return pods
	}
	d := deducer{r: a.Reader, services: map[string][]corev1.Service{}, owners: map[types.UID]*owned{}, selectors: map[string]*metav1.LabelSelector{}}
	out := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		out[i] = p
		if len(p.Spec.TopologySpreadConstraints) > 0 {
			continue
		}
		sel := d.selector(ctx, p)
		if sel == nil {
			continue
		}
		cp := p.DeepCopy()
		for _, tsc := range a.Constraints {
			c := *tsc.DeepCopy()
			c.LabelSelector = sel.DeepCopy()
			cp.Spec.TopologySpreadConstraints = append(cp.Spec.TopologySpreadConstraints, c)
		}
		out[i] = cp
	}
	return out
}

// owned is what a pod's controller adds to its selector: a ReplicationController's selector as
// labels (merged over the Services'), a ReplicaSet's or StatefulSet's as requirements.
type owned struct {
	labels       map[string]string
	requirements []metav1.LabelSelectorRequirement
}

type deducer struct {
	r         client.Reader
	services  map[string][]corev1.Service
	owners    map[types.UID]*owned
	selectors map[string]*metav1.LabelSelector
}

var (
	rcKind = corev1.SchemeGroupVersion.WithKind("ReplicationController")
	rsKind = appsv1.SchemeGroupVersion.WithKind("ReplicaSet")
	ssKind = appsv1.SchemeGroupVersion.WithKind("StatefulSet")
)

// selector is the pod's deduced selector, nil when empty (the kube-scheduler then applies no
// default constraint: an empty selector would count every pod of the namespace).
func (d *deducer) selector(ctx context.Context, p *corev1.Pod) *metav1.LabelSelector {
	owner := metav1.GetControllerOfNoCopy(p)
	key := p.Namespace + "\x00" + labels.Set(p.Labels).String()
	if owner != nil {
		key += "\x00" + string(owner.UID)
	}
	if sel, ok := d.selectors[key]; ok {
		return sel
	}
	set := labels.Set{}
	for _, svc := range d.servicesOf(ctx, p.Namespace) {
		if svc.Spec.Selector == nil {
			continue
		}
		if labels.SelectorFromValidatedSet(svc.Spec.Selector).Matches(labels.Set(p.Labels)) {
			maps.Copy(set, svc.Spec.Selector)
		}
	}
	var reqs []metav1.LabelSelectorRequirement
	if o := d.ownerOf(ctx, p, owner); o != nil {
		maps.Copy(set, o.labels)
		reqs = o.requirements
	}
	var sel *metav1.LabelSelector
	if len(set) > 0 || len(reqs) > 0 {
		sel = &metav1.LabelSelector{MatchExpressions: reqs}
		if len(set) > 0 {
			sel.MatchLabels = map[string]string(set)
		}
	}
	d.selectors[key] = sel
	return sel
}

func (d *deducer) servicesOf(ctx context.Context, ns string) []corev1.Service {
	if s, ok := d.services[ns]; ok {
		return s
	}
	list := &corev1.ServiceList{}
	if err := d.r.List(ctx, list, client.InNamespace(ns)); err != nil {
		// The kube-scheduler goes on without the Services it cannot list; so does Capstan.
		log.FromContext(ctx).V(1).Info("listing services for default topology spread", "namespace", ns, "error", err.Error())
	}
	d.services[ns] = list.Items
	return list.Items
}

func (d *deducer) ownerOf(ctx context.Context, p *corev1.Pod, ref *metav1.OwnerReference) *owned {
	if ref == nil {
		return nil
	}
	if o, ok := d.owners[ref.UID]; ok {
		return o
	}
	o, err := d.readOwner(ctx, p.Namespace, ref)
	if err != nil {
		log.FromContext(ctx).V(1).Info("reading pod owner for default topology spread", "namespace", p.Namespace, "owner", ref.Kind+"/"+ref.Name, "error", err.Error())
	}
	d.owners[ref.UID] = o
	return o
}

func (d *deducer) readOwner(ctx context.Context, ns string, ref *metav1.OwnerReference) (*owned, error) {
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil {
		return nil, nil //nolint:nilerr // the kube-scheduler ignores an unreadable owner API version
	}
	key := client.ObjectKey{Namespace: ns, Name: ref.Name}
	switch gv.WithKind(ref.Kind) {
	case rcKind:
		rc := &corev1.ReplicationController{}
		if err := d.r.Get(ctx, key, rc); err != nil {
			return nil, err
		}
		return &owned{labels: maps.Clone(rc.Spec.Selector)}, nil
	case rsKind:
		rs := &appsv1.ReplicaSet{}
		if err := d.r.Get(ctx, key, rs); err != nil {
			return nil, err
		}
		return &owned{requirements: requirementsOf(rs.Spec.Selector)}, nil
	case ssKind:
		ss := &appsv1.StatefulSet{}
		if err := d.r.Get(ctx, key, ss); err != nil {
			return nil, err
		}
		return &owned{requirements: requirementsOf(ss.Spec.Selector)}, nil
	}
	return nil, nil
}

// requirementsOf is the selector as requirements: each matchLabels entry an In of one value.
func requirementsOf(sel *metav1.LabelSelector) []metav1.LabelSelectorRequirement {
	if sel == nil {
		return nil
	}
	out := make([]metav1.LabelSelectorRequirement, 0, len(sel.MatchLabels)+len(sel.MatchExpressions))
	for _, k := range slices.Sorted(maps.Keys(sel.MatchLabels)) {
		out = append(out, metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{sel.MatchLabels[k]}})
	}
	for _, e := range sel.MatchExpressions {
		out = append(out, *e.DeepCopy())
	}
	return out
}
