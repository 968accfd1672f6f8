// Package planning turns the cluster's objects into what the solver reads and the solver's plans
// into objects: which pods provisioning acts on, the DaemonSet pods charged to every machine, the
// NodePools new machines may come from with what is left of their limits, and the NodeClaim of a
// planned machine. Provisioning, disruption and the tools that explain their decisions share it,
// so that no controller imports another and the tools import no controller.
package planning

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/registration"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/spend"
)

// Provisionable reports whether a pod is one provisioning acts on (and consolidation must find
// room for): not bound, not finished,
// not being deleted, not a DaemonSet's, not held by scheduling gates, and either marked
// unschedulable by the kube-scheduler or — for pods of the default scheduler — not tried by it yet.
// Planning a pod the scheduler has not tried is safe: the solver puts it on an existing node with
// room before it buys anything, as the scheduler would; and it keeps a burst's latency off the
// scheduler's queue, which on a busy cluster surfaces a thousand pods over a minute.
func Provisionable(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" || !pod.DeletionTimestamp.IsZero() ||
		pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed || len(pod.Spec.SchedulingGates) > 0 ||
		pods.OwnedByDaemonSet(pod) {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable
		}
	}
	return pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName
}

// SplitPods sorts pods into the provisionable ones and, by node name, the ones bound to a node
// and still running there (not finished, not being deleted).
func SplitPods(pods []corev1.Pod) (pending []*corev1.Pod, bound map[string][]*corev1.Pod) {
	bound = map[string][]*corev1.Pod{}
	for i := range pods {
		pod := &pods[i]
		switch {
		case Provisionable(pod):
			pending = append(pending, pod)
		case pod.Spec.NodeName != "" && pod.DeletionTimestamp.IsZero() && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
			bound[pod.Spec.NodeName] = append(bound[pod.Spec.NodeName], pod)
		}
	}
	return pending, bound
}

// Pool is a NodePool new machines may come from, and the same pool in the solver's terms.
type Pool struct {
	NodePool *karpv1.NodePool
	Solver   solver.NodePool
}

// Pools are the NodePools new machines may come from — managed by the cloud provider, not
// being deleted, not static, with instance types, valid requirements and per-node cost (nodeCost
// unless annotated) — each with what is left of its limits after the claims. Pools left out are
// logged with why.
func Pools(ctx context.Context, cloud cloudprovider.CloudProvider, nodeCost float64, nps []karpv1.NodePool, claims []karpv1.NodeClaim) []Pool {
	out, _ := readPools(ctx, cloud, nodeCost, nps, claims)
	return out
}

// WhyNoInstanceTypes is PoolFor's why when the cloud provider could not give a pool's instance
// types (its NodeClass not ready, or the cloud unreachable).
const WhyNoInstanceTypes = "no instance types"

// PoolError is a NodePool left out of Pools with an error: why, and the error.
type PoolError struct {
	NodePool, Why string
	Err           error
}

func (e *PoolError) Error() string {
	return fmt.Sprintf("nodepool %s: %s: %v", e.NodePool, e.Why, e.Err)
}

// Unwrap is the error.
func (e *PoolError) Unwrap() error { return e.Err }

// readPools is Pools, and the pools left out with an error.
func readPools(ctx context.Context, cloud cloudprovider.CloudProvider, nodeCost float64, nps []karpv1.NodePool, claims []karpv1.NodeClaim) ([]Pool, []*PoolError) {
	var out []Pool
	var errs []*PoolError
	for i := range nps {
		p, why, err := PoolFor(ctx, cloud, nodeCost, &nps[i], claims)
		if p == nil {
			if err != nil {
				log.FromContext(ctx).Info("skipping nodepool: "+why, "NodePool", klog.KObj(&nps[i]), "error", err.Error())
				errs = append(errs, &PoolError{NodePool: nps[i].Name, Why: why, Err: err})
			}
			continue
		}
		out = append(out, *p)
	}
	return out, errs
}

// PoolFor is the NodePool as one new machines may come from, or nil and why it is not one: being
// deleted, another provider's NodeClass, static — or, with the error, an invalid template (labels
// or taints no node could register with, nodepools.ValidateTemplate), no instance types, invalid
// requirements or an invalid per-node cost.
func PoolFor(ctx context.Context, cloud cloudprovider.CloudProvider, nodeCost float64, np *karpv1.NodePool, claims []karpv1.NodeClaim) (*Pool, string, error) {
	switch {
	case !np.DeletionTimestamp.IsZero():
		return nil, "being deleted", nil
	case !cloudprovider.Manages(cloud, np.Spec.Template.Spec.NodeClassRef):
		return nil, "its NodeClass is not one this cloud provider serves", nil
	case np.Spec.Replicas != nil:
		// A static pool keeps its replica count whatever is pending; pending pods never buy
		// machines from it (Karpenter's rule for spec.replicas).
		return nil, "static (spec.replicas): pending pods never buy machines from it", nil
	}
	if errs := nodepools.ValidateTemplate(np); len(errs) > 0 {
		return nil, "invalid template", errs.ToAggregate()
	}
	types, err := cloud.GetInstanceTypes(ctx, np)
	if err != nil {
		return nil, WhyNoInstanceTypes, err
	}
	// Capacity reservations: what the claims already hold is not there for new ones.
	types = cloudprovider.LessPinned(types, claims)
	reqs, err := nodepools.Requirements(np)
	if err != nil {
		return nil, "invalid requirements", err
	}
	cost, err := nodepools.NodeCost(np, nodeCost)
	if err != nil {
		return nil, "invalid per-node cost", err
	}
	weight := int32(0)
	if np.Spec.Weight != nil {
		weight = *np.Spec.Weight
	}
	return &Pool{NodePool: np, Solver: solver.NodePool{
		Name: np.Name, Weight: weight, RegistrationUnhealthy: registration.Unhealthy(np), Requirements: reqs,
		Taints: np.Spec.Template.Spec.Taints, StartupTaints: np.Spec.Template.Spec.StartupTaints,
		InstanceTypes: types, Remaining: remaining(np, claims, types), NodeCost: cost,
	}}, "", nil
}

// remaining is what is left of a NodePool's limits after its NodeClaims: a launched claim counts
// its capacity, one not yet launched the largest capacity it may launch as; against a spending
// limit (spend.LimitKey) each counts what it costs (nodeclaims.Spend).
func remaining(np *karpv1.NodePool, claims []karpv1.NodeClaim, types []*cloudprovider.InstanceType) corev1.ResourceList {
	if np.Spec.Limits == nil {
		return nil
	}
	left := nodepools.Bounded(np.Spec.Limits).DeepCopy()
	for i := range claims {
		nc := &claims[i]
		if nc.Labels[karpv1.NodePoolLabelKey] != np.Name {
			continue
		}
		used := maps.Clone(nc.Status.Capacity)
		if !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeLaunched) || len(used) == 0 {
			used = corev1.ResourceList{}
			for _, it := range nodeclaims.Candidates(nc, types) {
				for k, q := range it.Capacity {
					if cur, ok := used[k]; !ok || q.Cmp(cur) > 0 {
						used[k] = q
					}
				}
			}
		}
		// Every claim, launched or not, is one machine of a limit on nodes.
		used[karpv1.ResourceNodes] = *resource.NewQuantity(1, resource.DecimalSI)
		if _, capped := left[spend.LimitKey]; capped {
			used[spend.LimitKey] = *resource.NewMilliQuantity(spend.Milli(nodeclaims.Spend(nc, types)), resource.DecimalSI)
		}
		for k, q := range left {
			if u, ok := used[k]; ok {
				q.Sub(u)
				left[k] = q
			}
		}
	}
	for k, q := range left {
		if q.Sign() < 0 {
			left[k] = resource.Quantity{}
		}
	}
	return left
}

// NewNodeClaim is the NodeClaim of a planned machine from the pool: the pool's template, the
// plan's requirements and requests, a generated name.
func NewNodeClaim(np *karpv1.NodePool, planned *solver.PlannedNodeClaim) *karpv1.NodeClaim {
	t := np.Spec.Template
	labels := map[string]string{karpv1.NodePoolLabelKey: np.Name}
	for k, v := range t.ObjectMeta.Labels {
		labels[k] = v
	}
	annotations := map[string]string{
		karpv1.NodePoolHashAnnotationKey:              nodepools.Hash(np),
		karpv1.NodePoolHashVersionAnnotationKey:       nodepools.HashVersion,
		LaunchedForAnnotationKey:                      LaunchedFor(planned),
		karpv1.NodeClaimMinValuesRelaxedAnnotationKey: strconv.FormatBool(planned.MinValuesRelaxed),
	}
	for k, v := range t.ObjectMeta.Annotations {
		annotations[k] = v
	}
	reqs := planned.Requirements.Clone()
	var api []karpv1.NodeSelectorRequirementWithMinValues
	for _, r := range nodepools.ToAPI(reqs) {
		// The pool's name and template labels become labels, not requirements.
		if _, isLabel := labels[r.Key]; isLabel && r.Operator == karpv1.NodeSelectorOpIn && len(r.Values) == 1 && r.Key != karpv1.NodePoolLabelKey {
			continue
		}
		// A pod's NotIn or DoesNotExist on a key the API refuses in a NodeClaim's requirements
		// (kubernetes.io/hostname NotIn [node-1], a k8s.io label that must be absent) holds on the
		// new machine, which carries no label of that key: it is left off, or the whole claim
		// would be refused and every pod planned onto it would wait.
		if (r.Operator == karpv1.NodeSelectorOpNotIn || r.Operator == karpv1.NodeSelectorOpDoesNotExist) && karpv1.RestrictedRequirementKey(r.Key) != "" {
			continue
		}
		api = append(api, r)
	}
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name:        claimstore.NewName(np.Name),
			Labels:      labels,
			Annotations: annotations,
			Finalizers:  []string{karpv1.TerminationFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: karpv1.SchemeGroupVersion.String(), Kind: "NodePool", Name: np.Name, UID: np.UID,
				BlockOwnerDeletion: new(true),
			}},
		},
		Spec: karpv1.NodeClaimSpec{
			Taints:                 t.Spec.Taints,
			StartupTaints:          t.Spec.StartupTaints,
			Requirements:           api,
			Resources:              karpv1.ResourceRequirements{Requests: planned.Requests},
			NodeClassRef:           t.Spec.NodeClassRef,
			TerminationGracePeriod: t.Spec.TerminationGracePeriod,
			ExpireAfter:            t.Spec.ExpireAfter,
		},
	}
}

// LaunchedForAnnotationKey records on a NodeClaim what it was planned for, as LaunchedFor says
// it: what `kubectl capstan explain nodeclaim` answers to "why was this machine launched?".
const LaunchedForAnnotationKey = "capstan.dev/launched-for"

// LaunchedFor says what a planned machine is for: its pods (the first few), the instance types
// it may launch as (cheapest first, the first few) and the cheapest one's hourly price.
func LaunchedFor(planned *solver.PlannedNodeClaim) string {
	return fmt.Sprintf("%d pod(s): %s; instance types, cheapest first: %s; %.4f $/h",
		len(planned.Pods), PodList(planned.Pods), TypeList(planned.InstanceTypes), planned.Price)
}

// PodList names the first five pods (namespace/name) and counts the rest.
func PodList(pods []*corev1.Pod) string {
	const show = 5
	names := make([]string, 0, show)
	for i, p := range pods {
		if i == show {
			break
		}
		names = append(names, p.Namespace+"/"+p.Name)
	}
	s := strings.Join(names, ", ")
	if len(pods) > show {
		s += fmt.Sprintf(" and %d other(s)", len(pods)-show)
	}
	return s
}

// TypeList names the first three instance types and counts the rest.
func TypeList(its []*cloudprovider.InstanceType) string {
	const show = 3
	names := make([]string, 0, show)
	for i, it := range its {
		if i == show {
			break
		}
		names = append(names, it.Name)
	}
	s := strings.Join(names, ", ")
	if n := len(its) - show; n > 0 {
		s += fmt.Sprintf(" and %d other(s)", n)
	}
	return s
}

// SpendingLeft is what is left of the cluster's spending limit (dollars per hour; 0: none, and
// nil is returned) after every NodeClaim of the cluster, each counted as nodeclaims.Spend with its
// pool's instance types — or, for a claim of a pool new machines do not come from (static,
// another provider's, deleted), the types of every pool — and never below zero.
func SpendingLeft(limit float64, pools []Pool, claims []karpv1.NodeClaim) *float64 {
	if limit <= 0 {
		return nil
	}
	byPool := map[string][]*cloudprovider.InstanceType{}
	var all []*cloudprovider.InstanceType
	for _, p := range pools {
		byPool[p.NodePool.Name] = p.Solver.InstanceTypes
		all = append(all, p.Solver.InstanceTypes...)
	}
	var milli int64
	for i := range claims {
		types, ok := byPool[claims[i].Labels[karpv1.NodePoolLabelKey]]
		if !ok {
			types = all
		}
		milli += spend.Milli(nodeclaims.Spend(&claims[i], types))
	}
	left := max(0, float64(spend.Milli(limit)-milli)/1000)
	return &left
}
