package verify

import (
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

func resourceOne() *resource.Quantity { return resource.NewQuantity(1, resource.DecimalSI) }

type placedPod struct {
	pod  *corev1.Pod
	node *node
}

func (v *verifier) termNamespaces(p *corev1.Pod, t corev1.PodAffinityTerm) func(string) bool {
	if t.NamespaceSelector != nil {
		sel := selectorFor(t.NamespaceSelector)
		return func(ns string) bool {
			return slices.Contains(t.Namespaces, ns) || sel.Matches(labels.Set(v.in.NamespaceLabels[ns]))
		}
	}
	if len(t.Namespaces) == 0 {
		return func(ns string) bool { return ns == p.Namespace }
	}
	return func(ns string) bool { return slices.Contains(t.Namespaces, ns) }
}

func termSelector(p *corev1.Pod, ls *metav1.LabelSelector, matchLabelKeys []string) labels.Selector {
	sel := selectorFor(ls)
	for _, k := range matchLabelKeys {
		if val, ok := p.Labels[k]; ok {
			if r, err := labels.NewRequirement(k, "=", []string{val}); err == nil {
				sel = sel.Add(*r)
			}
		}
	}
	return sel
}

// topology checks required pod affinity and anti-affinity (both directions) and, where it is
// decidable from the final state alone, topology spread.
func (v *verifier) topology() {
	var all []placedPod
	for _, n := range v.final {
		for _, p := range n.pods {
			all = append(all, placedPod{p, n})
		}
	}
	placed := map[*corev1.Pod]bool{}
	for _, n := range v.final {
		for _, p := range n.placed {
			placed[p] = true
		}
	}
	for _, pp := range all {
		a := pp.pod.Spec.Affinity
		if a == nil || a.PodAntiAffinity == nil {
			continue
		}
		for _, t := range a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
			v.anti(pp, t, all, placed)
		}
	}
	for _, pp := range all {
		if !placed[pp.pod] {
			continue
		}
		if a := pp.pod.Spec.Affinity; a != nil && a.PodAffinity != nil {
			for _, t := range a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution {
				v.affinity(pp, t, all)
			}
		}
		for _, c := range pp.pod.Spec.TopologySpreadConstraints {
			if c.WhenUnsatisfiable == corev1.DoNotSchedule {
				v.spread(pp, c, all)
			}
		}
	}
}

func (v *verifier) anti(owner placedPod, t corev1.PodAffinityTerm, all []placedPod, placed map[*corev1.Pod]bool) {
	dom, ok := owner.node.labels[t.TopologyKey]
	if !ok {
		if placed[owner.pod] && t.TopologyKey != corev1.LabelHostname {
			v.fail("pod %s has anti-affinity on %s but its node's %s is not decided", key(owner.pod), t.TopologyKey, t.TopologyKey)
		}
		return
	}
	sel, inNS := termSelector(owner.pod, t.LabelSelector, t.MatchLabelKeys), v.termNamespaces(owner.pod, t)
	for _, other := range all {
		if other.pod == owner.pod || !(placed[owner.pod] || placed[other.pod]) {
			continue
		}
		od, ok := other.node.labels[t.TopologyKey]
		if !ok && placed[other.pod] && t.TopologyKey != corev1.LabelHostname && sel.Matches(labels.Set(other.pod.Labels)) && inNS(other.pod.Namespace) {
			v.fail("pod %s matches the anti-affinity of %s on %s but its node's %s is not decided", key(other.pod), key(owner.pod), t.TopologyKey, t.TopologyKey)
			continue
		}
		if ok && od == dom && inNS(other.pod.Namespace) && sel.Matches(labels.Set(other.pod.Labels)) {
			v.fail("pods %s and %s share %s=%s against %s's required anti-affinity", key(owner.pod), key(other.pod), t.TopologyKey, dom, key(owner.pod))
		}
	}
}

func (v *verifier) affinity(pp placedPod, t corev1.PodAffinityTerm, all []placedPod) {
	sel, inNS := termSelector(pp.pod, t.LabelSelector, t.MatchLabelKeys), v.termNamespaces(pp.pod, t)
	dom, ok := pp.node.labels[t.TopologyKey]
	sameDomain, anywhere := 0, 0
	for _, other := range all {
		if other.pod == pp.pod || !inNS(other.pod.Namespace) || !sel.Matches(labels.Set(other.pod.Labels)) {
			continue
		}
		anywhere++
		if od, ok2 := other.node.labels[t.TopologyKey]; ok && ok2 && od == dom {
			sameDomain++
		}
	}
	selfMatch := inNS(pp.pod.Namespace) && sel.Matches(labels.Set(pp.pod.Labels))
	if sameDomain == 0 && !(anywhere == 0 && selfMatch) {
		v.fail("pod %s: required pod affinity on %s (%s) has no matching pod in its domain %q", key(pp.pod), t.TopologyKey, sel.String(), dom)
	}
}

// spread checks a DoNotSchedule constraint. On the hostname key a machine may hold at most
// maxSkew matching pods besides none, whoever carries the constraint: kube-scheduler checks the
// spread pod when it binds it, so if every other matching pod bound first it would see them all,
// and a new node can always be a domain with zero. On other keys the final state decides only when
// every pod the selector matches carries the same constraint (then skew ≤ maxSkew must hold;
// otherwise the order of binding decides).
func (v *verifier) spread(pp placedPod, c corev1.TopologySpreadConstraint, all []placedPod) {
	sel := termSelector(pp.pod, c.LabelSelector, c.MatchLabelKeys)
	if c.TopologyKey == corev1.LabelHostname {
		n := 0
		for _, other := range all {
			if other.node == pp.node && other.pod.Namespace == pp.pod.Namespace && sel.Matches(labels.Set(other.pod.Labels)) {
				n++
			}
		}
		if n > int(c.MaxSkew) {
			v.fail("pod %s: %d matching pods on node %s exceed hostname maxSkew %d", key(pp.pod), n, pp.node.name, c.MaxSkew)
		}
		return
	}
	counts := map[string]int{}
	for _, other := range all {
		if other.pod.Namespace != pp.pod.Namespace || !sel.Matches(labels.Set(other.pod.Labels)) {
			continue
		}
		if !slices.ContainsFunc(other.pod.Spec.TopologySpreadConstraints, func(o corev1.TopologySpreadConstraint) bool {
			return o.TopologyKey == c.TopologyKey && o.MaxSkew == c.MaxSkew && o.WhenUnsatisfiable == c.WhenUnsatisfiable &&
				termSelector(other.pod, o.LabelSelector, o.MatchLabelKeys).String() == sel.String()
		}) {
			return
		}
		d, ok := other.node.labels[c.TopologyKey]
		if !ok {
			v.fail("pod %s: topology spread on %s but its node's %s is not decided", key(other.pod), c.TopologyKey, c.TopologyKey)
			return
		}
		counts[d]++
	}
	domains := v.eligibleDomains(pp.pod, c)
	lo, hi := -1, 0
	for _, d := range domains {
		n := counts[d]
		if lo < 0 || n < lo {
			lo = n
		}
		hi = max(hi, n)
	}
	minDomains := int32(1)
	if c.MinDomains != nil {
		minDomains = *c.MinDomains
	}
	if int32(len(domains)) < minDomains {
		lo = 0
	}
	if hi-lo > int(c.MaxSkew) {
		v.fail("pod %s: topology spread on %s has skew %d > maxSkew %d (counts %v)", key(pp.pod), c.TopologyKey, hi-lo, c.MaxSkew, counts)
	}
}

// eligibleDomains are the values the constraint's key can take on machines the pod could count:
// from the pools' instance-type offerings and labels and from existing nodes, narrowed by the
// pod's node affinity (nodeAffinityPolicy Honor, the default) and by its tolerations
// (nodeTaintsPolicy Honor).
func (v *verifier) eligibleDomains(pod *corev1.Pod, c corev1.TopologySpreadConstraint) []string {
	k := c.TopologyKey
	honorAffinity := c.NodeAffinityPolicy == nil || *c.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor
	honorTaints := c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor
	affinity := nodeaffinity.GetRequiredNodeAffinity(pod)
	admits := func(labels map[string]string, taints []corev1.Taint) bool {
		if honorTaints {
			if _, ok := tolerates(pod, taints); !ok {
				return false
			}
		}
		if honorAffinity {
			// Only the key itself is judged: the domain is eligible when some node in it can match.
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Labels: labels}}
			if ok, err := affinity.Match(n); err != nil || !ok {
				return false
			}
		}
		return true
	}
	seen := map[string]bool{}
	for _, pool := range v.pools {
		for _, it := range pool.InstanceTypes {
			for _, o := range it.Offerings {
				l := it.Requirements.Labels()
				l[corev1.LabelTopologyZone] = o.Zone
				l[karpv1.CapacityTypeLabelKey] = o.CapacityType
				maps.Copy(l, pool.Requirements.Labels())
				val, ok := l[k]
				if !ok {
					continue
				}
				if r, has := pool.Requirements.Get(k); has && !r.Allows(val) {
					continue
				}
				if admits(l, pool.Taints) {
					seen[val] = true
				}
			}
		}
	}
	for i := range v.in.Nodes {
		n := &v.in.Nodes[i]
		if val, ok := n.Labels[k]; ok && admits(n.Labels, n.Taints) {
			seen[val] = true
		}
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}
