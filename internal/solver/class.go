package solver

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"capstan.dev/capstan/internal/requirements"
)

// class is a set of pods with identical scheduling constraints and requests; every decision that
// depends only on those is made once per class.
type class struct {
	id     int
	pods   []*corev1.Pod
	ns     string
	labels map[string]string
	req    vec

	tolerations []corev1.Toleration
	hostPorts   []hostPort
	// nodeTerms are the ORed required node-affinity terms, each ANDed with the node selector; one
	// with only the selector when the pod has none.
	nodeTerms []nodeTerm
	spreads   []spreadConstraint
	affinity  []podTerm
	anti      []podTerm
	// preferences in relaxation order (see relaxationOrder).
	preferences []preference

	// matches are the topology groups whose selector matches the class's pods.
	matches []int
	// variants[i] is the class with the first i preferences relaxed (per node term); built lazily.
	variants []*variant
	// taintFits caches, per pool index (×2: PreferNoSchedule tolerated or avoided), whether the
	// class tolerates the pool's taints.
	taintFits []*poolFit
	// err is set when the pod's spec cannot be understood (a malformed requirement).
	err error
	// left counts the class's pods not yet placed or given up on.
	left int
}

type hostPort struct {
	protocol corev1.Protocol
	ip       string
	port     int32
}

func (a hostPort) conflicts(b hostPort) bool {
	if a.port != b.port || a.protocol != b.protocol {
		return false
	}
	return a.ip == b.ip || a.ip == "" || a.ip == "0.0.0.0" || b.ip == "" || b.ip == "0.0.0.0"
}

type spreadConstraint struct {
	group      int
	maxSkew    int32
	minDomains int32
	// honorAffinity and honorTaints are nodeAffinityPolicy and nodeTaintsPolicy == Honor.
	honorAffinity, honorTaints bool
	selfMatch                  bool
	desc                       string
}

type podTerm struct {
	group     int
	selfMatch bool
	desc      string
}

type prefKind int

const (
	prefNodeAffinity prefKind = iota
	prefPodAffinity
	prefPodAntiAffinity
	prefSpread
	prefTaints
)

type preference struct {
	kind   prefKind
	weight int32
	reqs   requirements.Requirements
	term   podTerm
	spread spreadConstraint
	desc   string
}

// signature is what makes two pods interchangeable for the solver.
func podHostPorts(p *corev1.Pod) []hostPort {
	var out []hostPort
	for _, cs := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			for _, port := range cs[i].Ports {
				if port.HostPort > 0 {
					proto := port.Protocol
					if proto == "" {
						proto = corev1.ProtocolTCP
					}
					out = append(out, hostPort{protocol: proto, ip: port.HostIP, port: port.HostPort})
				}
			}
		}
	}
	return out
}

// podSignature is a key equal for two pods exactly when the solver treats them alike: namespace,
// labels, requests, node selector, affinity, tolerations, topology spread and host ports. Strings
// are length-prefixed; the API structs are written in their protobuf encoding, which is
// deterministic (map keys sorted) and needs no reflection.
func podSignature(p *corev1.Pod, req corev1.ResourceList) string {
	b := make([]byte, 0, 256)
	b = appendSigString(b, p.Namespace)
	b = appendSigMap(b, p.Labels)
	names := make([]string, 0, len(req))
	for n := range req {
		names = append(names, string(n))
	}
	slices.Sort(names)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, n := range names {
		q := req[corev1.ResourceName(n)]
		b = appendSigString(b, n)
		b = appendSigString(b, q.String())
	}
	b = appendSigMap(b, p.Spec.NodeSelector)
	if a := p.Spec.Affinity; a != nil {
		b = append(b, 1)
		b = appendSigProto(b, a)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, uint64(len(p.Spec.Tolerations)))
	for i := range p.Spec.Tolerations {
		b = appendSigProto(b, &p.Spec.Tolerations[i])
	}
	b = binary.AppendUvarint(b, uint64(len(p.Spec.TopologySpreadConstraints)))
	for i := range p.Spec.TopologySpreadConstraints {
		b = appendSigProto(b, &p.Spec.TopologySpreadConstraints[i])
	}
	hp := podHostPorts(p)
	b = binary.AppendUvarint(b, uint64(len(hp)))
	for _, h := range hp {
		b = appendSigString(b, string(h.protocol))
		b = appendSigString(b, h.ip)
		b = binary.AppendVarint(b, int64(h.port))
	}
	return string(b)
}

func appendSigString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendSigMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = binary.AppendUvarint(b, uint64(len(keys)))
	for _, k := range keys {
		b = appendSigString(b, k)
		b = appendSigString(b, m[k])
	}
	return b
}

// sigProto is an API struct's generated protobuf encoder.
type sigProto interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

func appendSigProto(b []byte, m sigProto) []byte {
	n := m.Size()
	b = binary.AppendUvarint(b, uint64(n))
	b = slices.Grow(b, n)
	// The encoder writes backwards from the end of the buffer it is given.
	if _, err := m.MarshalToSizedBuffer(b[len(b) : len(b)+n]); err != nil {
		// Unreachable for API types (Size measured the buffer); a marker keeps keys distinct.
		return append(b, 0xff)
	}
	return b[:len(b)+n]
}

// buildClass reads the constraints of a class's first pod.
func (s *solver) buildClass(id int, p *corev1.Pod, req corev1.ResourceList) *class {
	c := &class{
		id: id, ns: p.Namespace, labels: p.Labels, req: s.ri.vec(req),
		tolerations: p.Spec.Tolerations, hostPorts: podHostPorts(p),
	}
	terms, err := podNodeTerms(p)
	if err != nil {
		c.err = err
		terms = []nodeTerm{{}}
	}
	c.nodeTerms = terms
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		for _, pt := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
			rs, err := expressionRequirements(pt.Preference.MatchExpressions)
			if err != nil || len(pt.Preference.MatchExpressions) == 0 {
				// An empty preferred term matches every node; it prefers nothing.
				continue
			}
			c.preferences = append(c.preferences, preference{kind: prefNodeAffinity, weight: pt.Weight, reqs: rs,
				desc: fmt.Sprintf("preferred node affinity (weight %d)", pt.Weight)})
		}
	}
	for _, tsc := range p.Spec.TopologySpreadConstraints {
		sc, err := s.spread(p, tsc)
		if err != nil {
			c.err = err
			continue
		}
		if tsc.WhenUnsatisfiable == corev1.ScheduleAnyway {
			c.preferences = append(c.preferences, preference{kind: prefSpread, weight: 0, spread: sc, desc: "ScheduleAnyway " + sc.desc})
		} else {
			c.spreads = append(c.spreads, sc)
		}
	}
	if a := p.Spec.Affinity; a != nil {
		if pa := a.PodAffinity; pa != nil {
			for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
				pt, err := s.podTerm(p, t, "pod affinity")
				if err != nil {
					c.err = err
					continue
				}
				c.affinity = append(c.affinity, pt)
			}
			for _, wt := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
				pt, err := s.podTerm(p, wt.PodAffinityTerm, "pod affinity")
				if err != nil {
					continue
				}
				c.preferences = append(c.preferences, preference{kind: prefPodAffinity, weight: wt.Weight, term: pt,
					desc: fmt.Sprintf("preferred %s (weight %d)", pt.desc, wt.Weight)})
			}
		}
		if pa := a.PodAntiAffinity; pa != nil {
			for _, t := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
				pt, err := s.podTerm(p, t, "pod anti-affinity")
				if err != nil {
					c.err = err
					continue
				}
				c.anti = append(c.anti, pt)
			}
			for _, wt := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
				pt, err := s.podTerm(p, wt.PodAffinityTerm, "pod anti-affinity")
				if err != nil {
					continue
				}
				c.preferences = append(c.preferences, preference{kind: prefPodAntiAffinity, weight: wt.Weight, term: pt,
					desc: fmt.Sprintf("preferred %s (weight %d)", pt.desc, wt.Weight)})
			}
		}
	}
	// PreferNoSchedule taints are avoided until everything else has been relaxed.
	if s.preferNoScheduleTaints {
		c.preferences = append(c.preferences, preference{kind: prefTaints, weight: math.MaxInt32, desc: "PreferNoSchedule taints"})
	}
	sort.SliceStable(c.preferences, func(i, j int) bool { return relaxedBefore(&c.preferences[i], &c.preferences[j]) })
	return c
}

// relaxationRank orders the kinds of preferences as they are given up, as Karpenter relaxes them:
// preferred pod affinity, preferred pod anti-affinity, preferred node affinity, ScheduleAnyway
// spreads, and PreferNoSchedule taints last.
var relaxationRank = [...]int{prefPodAffinity: 0, prefPodAntiAffinity: 1, prefNodeAffinity: 2, prefSpread: 3, prefTaints: 4}

// relaxedBefore orders preferences for relaxation. Within a kind, pod (anti-)affinity terms are
// ANDed and the lightest goes first; preferred node affinity terms are alternatives, enforced one
// at a time, heaviest first (see variant).
func relaxedBefore(a, b *preference) bool {
	if ra, rb := relaxationRank[a.kind], relaxationRank[b.kind]; ra != rb {
		return ra < rb
	}
	if a.kind == prefNodeAffinity {
		return a.weight > b.weight
	}
	return a.weight < b.weight
}

func selectorFor(ls *metav1.LabelSelector, extra map[string]string) (labels.Selector, error) {
	if ls == nil {
		// A nil selector matches nothing, as in kube-scheduler.
		return labels.Nothing(), nil
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return nil, err
	}
	for k, v := range extra {
		r, err := labels.NewRequirement(k, "=", []string{v})
		if err != nil {
			return nil, err
		}
		sel = sel.Add(*r)
	}
	return sel, nil
}

func (s *solver) spread(p *corev1.Pod, tsc corev1.TopologySpreadConstraint) (spreadConstraint, error) {
	extra := map[string]string{}
	for _, k := range tsc.MatchLabelKeys {
		if v, ok := p.Labels[k]; ok {
			extra[k] = v
		}
	}
	sel, err := selectorFor(tsc.LabelSelector, extra)
	if err != nil {
		return spreadConstraint{}, fmt.Errorf("topology spread selector: %w", err)
	}
	g := s.group(normalizeKey(tsc.TopologyKey), sel, nsScope{names: []string{p.Namespace}})
	minDomains := int32(1)
	if tsc.MinDomains != nil {
		minDomains = *tsc.MinDomains
	}
	return spreadConstraint{
		group: g, maxSkew: tsc.MaxSkew, minDomains: minDomains,
		honorAffinity: tsc.NodeAffinityPolicy == nil || *tsc.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
		honorTaints:   tsc.NodeTaintsPolicy != nil && *tsc.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor,
		selfMatch:     sel.Matches(labels.Set(p.Labels)),
		desc:          fmt.Sprintf("topology spread %s maxSkew %d", shortKey(normalizeKey(tsc.TopologyKey)), tsc.MaxSkew),
	}, nil
}

func (s *solver) podTerm(p *corev1.Pod, t corev1.PodAffinityTerm, what string) (podTerm, error) {
	extra := map[string]string{}
	for _, k := range t.MatchLabelKeys {
		if v, ok := p.Labels[k]; ok {
			extra[k] = v
		}
	}
	sel, err := selectorFor(t.LabelSelector, extra)
	if err != nil {
		return podTerm{}, fmt.Errorf("%s selector: %w", what, err)
	}
	scope := nsScope{names: t.Namespaces}
	if t.NamespaceSelector != nil {
		nsSel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
		if err != nil {
			return podTerm{}, fmt.Errorf("%s namespace selector: %w", what, err)
		}
		scope.selector = nsSel
	} else if len(t.Namespaces) == 0 {
		scope.names = []string{p.Namespace}
	}
	g := s.group(normalizeKey(t.TopologyKey), sel, scope)
	return podTerm{
		group:     g,
		selfMatch: sel.Matches(labels.Set(p.Labels)) && scope.contains(p.Namespace, s.in.NamespaceLabels),
		desc:      fmt.Sprintf("%s on %s (%s)", what, shortKey(normalizeKey(t.TopologyKey)), sel.String()),
	}, nil
}

// nsScope is the namespaces a pod-affinity term or spread counts pods in.
type nsScope struct {
	names    []string
	selector labels.Selector
}

func (n nsScope) key() string {
	names := slices.Clone(n.names)
	slices.Sort(names)
	k := strings.Join(names, ",")
	if n.selector != nil {
		k += "|" + n.selector.String()
	}
	return k
}

func (n nsScope) contains(ns string, nsLabels map[string]map[string]string) bool {
	if slices.Contains(n.names, ns) {
		return true
	}
	return n.selector != nil && n.selector.Matches(labels.Set(nsLabels[ns]))
}

func shortKey(k string) string {
	switch k {
	case corev1.LabelTopologyZone:
		return "zone"
	case corev1.LabelHostname:
		return "hostname"
	}
	return k
}
