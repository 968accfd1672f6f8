package solver

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/requirements"
)

// nodeTerm is one ORed term of a pod's required node affinity, ANDed with its node selector.
type nodeTerm struct {
	reqs requirements.Requirements
	// name is the term's matchFields requirement on metadata.name, if any. A name that must be
	// one of a list can only be an existing node's: a new machine's name is not known.
	name *requirements.Requirement
}

// errNoNodeTerm is the reason of a pod whose required node affinity can match no node.
var errNoNodeTerm = errors.New("required node affinity: every nodeSelectorTerm is empty and matches no node")

// normalizeKey maps a deprecated node label key to the stable key it means.
func normalizeKey(k string) string {
	if n, ok := karpv1.NormalizedLabels[k]; ok {
		return n
	}
	return k
}

// selectorRequirements reads a node selector, deprecated keys normalized.
func selectorRequirements(sel map[string]string) requirements.Requirements {
	var rs requirements.Requirements
	for k, v := range sel {
		rs.Add(requirements.Single(normalizeKey(k), v))
	}
	return rs
}

// expressionRequirements reads node-selector expressions, deprecated keys normalized.
func expressionRequirements(exprs []corev1.NodeSelectorRequirement) (requirements.Requirements, error) {
	var rs requirements.Requirements
	for _, e := range exprs {
		r, err := requirements.New(normalizeKey(e.Key), requirements.Operator(e.Operator), e.Values...)
		if err != nil {
			return rs, err
		}
		rs.Add(r)
	}
	return rs, nil
}

// podNodeTerms returns the pod's required node terms as Kubernetes reads them: the node
// selector ANDed with each ORed nodeSelectorTerm of the required node affinity. An empty term (no
// expressions, no fields) matches no node and is dropped; a pod whose terms are all empty gets
// errNoNodeTerm. A term that cannot be read is an error: the pod's constraints are not understood.
func podNodeTerms(p *corev1.Pod) ([]nodeTerm, error) {
	selector := selectorRequirements(p.Spec.NodeSelector)
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
		len(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		return []nodeTerm{{reqs: selector}}, nil
	}
	var terms []nodeTerm
	for i, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if len(term.MatchExpressions) == 0 && len(term.MatchFields) == 0 {
			continue
		}
		rs, err := expressionRequirements(term.MatchExpressions)
		if err != nil {
			return nil, fmt.Errorf("node affinity term %d: %w", i, err)
		}
		rs.AddAll(selector)
		nt := nodeTerm{reqs: rs}
		for _, f := range term.MatchFields {
			if f.Key != "metadata.name" {
				return nil, fmt.Errorf("node affinity term %d: matchFields key %q is not supported (only metadata.name)", i, f.Key)
			}
			r, err := requirements.New(f.Key, requirements.Operator(f.Operator), f.Values...)
			if err != nil {
				return nil, fmt.Errorf("node affinity term %d: %w", i, err)
			}
			if nt.name != nil {
				r = nt.name.Intersect(&r)
			}
			nt.name = &r
		}
		terms = append(terms, nt)
	}
	if len(terms) == 0 {
		return nil, errNoNodeTerm
	}
	return terms, nil
}

// allowsNode reports whether the term admits an existing node of that name and labels.
func (nt *nodeTerm) allowsNode(name string, labels map[string]string) bool {
	if nt.name != nil && !nt.name.Allows(name) {
		return false
	}
	_, ok := nt.reqs.Satisfied(labels)
	return ok
}

// allowsNew reports whether a new machine can match the term's name requirement.
func (nt *nodeTerm) allowsNew() bool {
	return nt.name == nil || !nt.name.IsFinite()
}

// key identifies the term for caches.
func (nt *nodeTerm) key() string {
	if nt.name == nil {
		return nt.reqs.String()
	}
	var b strings.Builder
	b.WriteString(nt.reqs.String())
	b.WriteString("|name ")
	b.WriteString(nt.name.String())
	return b.String()
}
