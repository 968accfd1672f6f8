// Package verify checks a solver plan against its input with code of its own — Kubernetes'
// node-affinity and toleration helpers rather than the solver's requirement algebra and
// bookkeeping — so that property tests catch the solver breaking a hard constraint.
package verify

import (
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver"
)

// node is a node of the final state: existing, or planned.
type node struct {
	name   string
	labels map[string]string
	pods   []*corev1.Pod
	// placed are the pods the plan put here.
	placed []*corev1.Pod
}

// Plan returns every violated hard constraint it finds; none means the plan is sound.
func Plan(in solver.Input, r *solver.Result) []error {
	v := &verifier{in: in, r: r, pools: map[string]*solver.NodePool{}}
	for i := range in.NodePools {
		v.pools[in.NodePools[i].Name] = &in.NodePools[i]
	}
	v.accounting()
	v.nodes()
	v.claims()
	v.bindings()
	v.limits()
	v.reservations()
	v.topology()
	return v.errs
}

// reservations: no capacity reservation gets more claims than it has machines left, and a
// claim pinned to one can launch only there.
func (v *verifier) reservations() {
	slots := map[string]int{}
	for i := range v.in.NodePools {
		for _, it := range v.in.NodePools[i].InstanceTypes {
			for _, o := range it.Offerings {
				if o.ReservationID == "" {
					continue
				}
				n := o.ReservationCapacity
				if !o.Available {
					n = 0
				}
				if cur, ok := slots[o.ReservationID]; !ok || n < cur {
					slots[o.ReservationID] = n
				}
			}
		}
	}
	held := map[string]int{}
	for i, nc := range v.r.NodeClaims {
		r, ok := nc.Requirements.Get(cloudprovider.ReservationIDLabelKey)
		if !ok {
			continue
		}
		if !r.IsFinite() || len(r.Values()) != 1 {
			v.fail("claim %d: pinned to reservations %s, not to one", i, r.String())
			continue
		}
		id := r.Values()[0]
		held[id]++
		if ct, ok := nc.Requirements.Get(karpv1.CapacityTypeLabelKey); !ok || ct.Len() != 1 || !ct.Allows(karpv1.CapacityTypeReserved) {
			v.fail("claim %d: pinned to %s but may launch other capacity types", i, id)
		}
	}
	for id, n := range held {
		if n > slots[id] {
			v.fail("reservation %s: %d claims pinned, %d machines left", id, n, slots[id])
		}
	}
}

type verifier struct {
	in    solver.Input
	r     *solver.Result
	pools map[string]*solver.NodePool
	final []*node
	errs  []error
}

func (v *verifier) fail(format string, args ...any) {
	v.errs = append(v.errs, fmt.Errorf(format, args...))
}

func key(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// accounting: every input pod is placed or reported exactly once.
func (v *verifier) accounting() {
	seen := map[string]int{}
	for _, nc := range v.r.NodeClaims {
		for _, p := range nc.Pods {
			seen[key(p)]++
		}
	}
	for _, b := range v.r.Bindings {
		seen[key(b.Pod)]++
	}
	for _, u := range v.r.Unschedulable {
		seen[key(u.Pod)]++
		if u.Reason == "" {
			v.fail("pod %s is unschedulable without a reason", key(u.Pod))
		}
	}
	for _, p := range v.in.Pods {
		if seen[key(p)] != 1 {
			v.fail("pod %s appears %d times in the plan", key(p), seen[key(p)])
		}
	}
}

func (v *verifier) nodes() {
	for i := range v.in.Nodes {
		n := &v.in.Nodes[i]
		v.final = append(v.final, &node{name: n.Name, labels: n.Labels, pods: append([]*corev1.Pod(nil), n.Pods...)})
	}
	for i, nc := range v.r.NodeClaims {
		l := withDeprecatedLabels(nc.Requirements.Labels())
		l[corev1.LabelHostname] = fmt.Sprintf("planned-%d", i)
		l[karpv1.NodePoolLabelKey] = nc.NodePool
		v.final = append(v.final, &node{name: l[corev1.LabelHostname], labels: l, pods: nc.Pods, placed: nc.Pods})
	}
}

func requests(p *corev1.Pod) corev1.ResourceList {
	// As kube-scheduler (InPlacePodVerticalScaling is on): a resizing pod counts the larger of
	// its desired, allocated and actuated requests.
	rl := resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{UseStatusResources: true})
	rl[corev1.ResourcePods] = *resourceOne()
	return rl
}

func tolerates(p *corev1.Pod, taints []corev1.Taint) (corev1.Taint, bool) {
	for i := range taints {
		t := &taints[i]
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for j := range p.Spec.Tolerations {
			if p.Spec.Tolerations[j].ToleratesTaint(klog.Background(), t, false) {
				ok = true
				break
			}
		}
		if !ok {
			return *t, false
		}
	}
	return corev1.Taint{}, true
}

// claims: for every instance type and offering a claim could launch as, its pods fit, their node
// affinity holds and the pool's taints are tolerated.
func (v *verifier) claims() {
	for i, nc := range v.r.NodeClaims {
		pool, ok := v.pools[nc.NodePool]
		if !ok {
			v.fail("claim %d: unknown NodePool %s", i, nc.NodePool)
			continue
		}
		if len(nc.InstanceTypes) == 0 {
			v.fail("claim %d: no instance types", i)
			continue
		}
		for _, p := range nc.Pods {
			if t, ok := tolerates(p, pool.Taints); !ok {
				v.fail("claim %d: pod %s does not tolerate taint %s of NodePool %s", i, key(p), t.Key, pool.Name)
			}
		}
		launchable := 0
		for _, it := range nc.InstanceTypes {
			for _, o := range it.Offerings {
				labels := v.launchLabels(nc, pool, it, o)
				if labels == nil {
					continue
				}
				launchable++
				v.claimOn(i, nc, pool, it, labels)
			}
		}
		if launchable == 0 {
			v.fail("claim %d: no instance type has an available offering its requirements allow", i)
		}
	}
}

// launchLabels are the labels of a machine of type it bought as offering o, or nil when the
// claim's requirements exclude that offering.
func (v *verifier) launchLabels(nc *solver.PlannedNodeClaim, pool *solver.NodePool, it *cloudprovider.InstanceType, o cloudprovider.Offering) map[string]string {
	if !o.Available {
		return nil
	}
	l := it.Requirements.Labels()
	l[corev1.LabelTopologyZone] = o.Zone
	l[karpv1.CapacityTypeLabelKey] = o.CapacityType
	l[karpv1.NodePoolLabelKey] = pool.Name
	maps.Copy(l, pool.Requirements.Labels())
	if _, ok := nc.Requirements.Satisfied(l); !ok {
		return nil
	}
	return withDeprecatedLabels(l)
}

// withDeprecatedLabels adds the deprecated aliases of the stable labels a node carries, as the
// kubelet and cloud providers set them.
func withDeprecatedLabels(l map[string]string) map[string]string {
	for old, stable := range karpv1.NormalizedLabels {
		if v, ok := l[stable]; ok {
			l[old] = v
		}
	}
	return l
}

func (v *verifier) claimOn(i int, nc *solver.PlannedNodeClaim, pool *solver.NodePool, it *cloudprovider.InstanceType, l map[string]string) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "candidate", Labels: l}}
	total := corev1.ResourceList{}
	add := func(rl corev1.ResourceList) {
		for k, q := range rl {
			cur := total[k]
			cur.Add(q)
			total[k] = cur
		}
	}
	var running []*corev1.Pod
	for _, ds := range v.in.DaemonSetPods {
		if _, ok := tolerates(ds, pool.Taints); !ok {
			continue
		}
		if match, _ := nodeaffinity.GetRequiredNodeAffinity(ds).Match(n); match {
			add(requests(ds))
			running = append(running, ds)
		}
	}
	for _, p := range nc.Pods {
		if match, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(n); err != nil || !match {
			v.fail("claim %d as %s in %s: pod %s's node selector or required node affinity does not match labels %v",
				i, it.Name, l[corev1.LabelTopologyZone], key(p), l)
		}
		add(requests(p))
	}
	alloc := it.Allocatable()
	for name, q := range total {
		a := alloc[name]
		if q.Cmp(a) > 0 {
			v.fail("claim %d as %s: pods and daemonsets request %s %s, allocatable is %s", i, it.Name, name, q.String(), a.String())
		}
	}
	v.hostPorts(fmt.Sprintf("claim %d as %s", i, it.Name), append(running, nc.Pods...))
}

func (v *verifier) hostPorts(where string, pods []*corev1.Pod) {
	used := map[string]string{}
	for _, p := range pods {
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				if port.HostPort == 0 {
					continue
				}
				k := fmt.Sprintf("%s/%d", port.Protocol, port.HostPort)
				if other, ok := used[k]; ok && other != key(p) {
					v.fail("%s: host port %s used by %s and %s", where, k, other, key(p))
				}
				used[k] = key(p)
			}
		}
	}
}

// bindings: pods placed on existing nodes fit, match and tolerate them.
func (v *verifier) bindings() {
	byName := map[string]*solver.ExistingNode{}
	for i := range v.in.Nodes {
		byName[v.in.Nodes[i].Name] = &v.in.Nodes[i]
	}
	added := map[string][]*corev1.Pod{}
	for _, b := range v.r.Bindings {
		n, ok := byName[b.Node]
		if !ok {
			v.fail("pod %s bound to unknown node %s", key(b.Pod), b.Node)
			continue
		}
		if n.Unschedulable {
			v.fail("pod %s bound to unschedulable node %s", key(b.Pod), b.Node)
		}
		if t, ok := tolerates(b.Pod, n.Taints); !ok {
			v.fail("pod %s bound to %s does not tolerate taint %s", key(b.Pod), b.Node, t.Key)
		}
		kn := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels}}
		if match, err := nodeaffinity.GetRequiredNodeAffinity(b.Pod).Match(kn); err != nil || !match {
			v.fail("pod %s bound to %s: node affinity does not match", key(b.Pod), b.Node)
		}
		added[b.Node] = append(added[b.Node], b.Pod)
	}
	for _, fn := range v.final {
		extra := added[fn.name]
		if len(extra) == 0 {
			continue
		}
		fn.pods = append(fn.pods, extra...)
		fn.placed = append(fn.placed, extra...)
		n := byName[fn.name]
		total := corev1.ResourceList{}
		for _, p := range fn.pods {
			for k, q := range requests(p) {
				cur := total[k]
				cur.Add(q)
				total[k] = cur
			}
		}
		for name, q := range total {
			a := n.Allocatable[name]
			if q.Cmp(a) > 0 {
				v.fail("node %s: pods request %s %s, allocatable is %s", n.Name, name, q.String(), a.String())
			}
		}
		v.hostPorts("node "+n.Name, fn.pods)
	}
}

// limits: the largest machine each claim could become, summed per pool, stays within the limits.
func (v *verifier) limits() {
	used := map[string]corev1.ResourceList{}
	for _, nc := range v.r.NodeClaims {
		// Each claim is one machine of a limit on nodes.
		largest := corev1.ResourceList{karpv1.ResourceNodes: *resource.NewQuantity(1, resource.DecimalSI)}
		for _, it := range nc.InstanceTypes {
			for k, q := range it.Capacity {
				if cur, ok := largest[k]; !ok || q.Cmp(cur) > 0 {
					largest[k] = q
				}
			}
		}
		if used[nc.NodePool] == nil {
			used[nc.NodePool] = corev1.ResourceList{}
		}
		for k, q := range largest {
			cur := used[nc.NodePool][k]
			cur.Add(q)
			used[nc.NodePool][k] = cur
		}
	}
	for name, pool := range v.pools {
		for k, lim := range pool.Remaining {
			if u, ok := used[name][k]; ok && u.Cmp(lim) > 0 {
				v.fail("NodePool %s: planned claims may use %s %s, only %s left", name, k, u.String(), lim.String())
			}
		}
	}
}

// selectorFor mirrors kube-scheduler: a nil selector matches nothing.
func selectorFor(ls *metav1.LabelSelector) labels.Selector {
	if ls == nil {
		return labels.Nothing()
	}
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return labels.Nothing()
	}
	return s
}
