package provisioning

import (
	"context"
	"fmt"
	"maps"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/solver"
)

// clusterState is what a pass reads of the cluster, in the solver's terms.
type clusterState struct {
	pools   []solver.NodePool
	byName  map[string]*karpv1.NodePool
	nodes   []solver.ExistingNode
	daemons []*corev1.Pod
	// inFlight indexes, by claim name, the nodes that are NodeClaims without a Node yet.
	inFlight map[string]int
}

func (p *Provisioner) state(ctx context.Context, bound map[string][]*corev1.Pod) (*clusterState, error) {
	st := &clusterState{byName: map[string]*karpv1.NodePool{}, inFlight: map[string]int{}}
	nps := &karpv1.NodePoolList{}
	if err := p.Client.List(ctx, nps); err != nil {
		return nil, fmt.Errorf("listing nodepools: %w", err)
	}
	ncs := &karpv1.NodeClaimList{}
	if err := p.Client.List(ctx, ncs); err != nil {
		return nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	ncs.Items = p.withCreated(ncs.Items)
	nodes := &corev1.NodeList{}
	if err := p.Client.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	dss := &appsv1.DaemonSetList{}
	if err := p.Client.List(ctx, dss); err != nil {
		return nil, fmt.Errorf("listing daemonsets: %w", err)
	}
	st.daemons = DaemonSetPods(dss.Items)

	pools := SolverPools(ctx, p.Cloud, p.NodeCost, nps.Items, ncs.Items)
	its := map[string][]*cloudprovider.InstanceType{}
	for _, pool := range pools {
		st.byName[pool.NodePool.Name] = pool.NodePool
		st.pools = append(st.pools, pool.Solver)
		its[pool.NodePool.Name] = pool.Solver.InstanceTypes
	}

	claimByProvider := map[string]*karpv1.NodeClaim{}
	for i := range ncs.Items {
		if id := ncs.Items[i].Status.ProviderID; id != "" {
			claimByProvider[id] = &ncs.Items[i]
		}
	}
	byProvider := map[string]*corev1.Node{}
	nodeIndex := map[string]int{}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if n.Spec.ProviderID != "" {
			byProvider[n.Spec.ProviderID] = n
		}
		nodeIndex[n.Name] = len(st.nodes)
		st.nodes = append(st.nodes, solver.ExistingNode{
			Name: n.Name, Labels: n.Labels, Taints: nodeclaims.SchedulingTaints(n, claimByProvider[n.Spec.ProviderID]), Allocatable: n.Status.Allocatable,
			Pods:          bound[n.Name],
			Unschedulable: n.Spec.Unschedulable || !n.DeletionTimestamp.IsZero(),
		})
	}
	// In-flight NodeClaims: launched or not, their node has not registered yet. Pods planned
	// for them are still pending and will be placed on them again.
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		if !nc.DeletionTimestamp.IsZero() {
			continue
		}
		if nc.Status.ProviderID != "" && byProvider[nc.Status.ProviderID] != nil {
			continue
		}
		if en, ok := nodeclaims.InFlight(nc, its[nc.Labels[karpv1.NodePoolLabelKey]], st.daemons); ok {
			st.inFlight[nc.Name] = len(st.nodes)
			st.nodes = append(st.nodes, en)
		}
	}
	st.reserve(ncs.Items, bound, nodeIndex, byProvider)
	return st, nil
}

// reserve counts, on each disruption replacement (in flight or registered), the pods its command
// moves there that still run on the nodes it replaces (nodeclaims.ReservedPods).
func (st *clusterState) reserve(claims []karpv1.NodeClaim, bound map[string][]*corev1.Pod, nodeIndex map[string]int, byProvider map[string]*corev1.Node) {
	var byUID map[types.UID]*corev1.Pod
	for i := range claims {
		nc := &claims[i]
		if nc.Annotations[nodeclaims.ReservedPodsAnnotationKey] == "" || !nc.DeletionTimestamp.IsZero() {
			continue
		}
		idx, ok := st.inFlight[nc.Name]
		if n := byProvider[nc.Status.ProviderID]; nc.Status.ProviderID != "" && n != nil {
			idx, ok = nodeIndex[n.Name]
		}
		if !ok {
			continue
		}
		if byUID == nil {
			byUID = map[types.UID]*corev1.Pod{}
			for _, pods := range bound {
				for _, p := range pods {
					byUID[p.UID] = p
				}
			}
		}
		if pods := nodeclaims.ReservedPods(nc, byUID); len(pods) > 0 {
			en := &st.nodes[idx]
			en.Pods = append(slices.Clip(en.Pods), pods...)
			en.Requested = nil
		}
	}
}

// DaemonSetPods are one pod per DaemonSet, its template, as the solver charges them to machines.
func DaemonSetPods(dss []appsv1.DaemonSet) []*corev1.Pod {
	out := make([]*corev1.Pod, 0, len(dss))
	for i := range dss {
		ds := &dss[i]
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name, Labels: ds.Spec.Template.Labels},
			Spec: ds.Spec.Template.Spec})
	}
	return out
}

// Pool is a NodePool new machines may come from, and the same pool in the solver's terms.
type Pool struct {
	NodePool *karpv1.NodePool
	Solver   solver.NodePool
}

// SolverPools are the NodePools new machines may come from — managed by the cloud provider, not
// being deleted, not static, with instance types, valid requirements and per-node cost (nodeCost
// unless annotated) — each with what is left of its limits after the claims. Pools left out are
// logged with why.
func SolverPools(ctx context.Context, cloud cloudprovider.CloudProvider, nodeCost float64, nps []karpv1.NodePool, claims []karpv1.NodeClaim) []Pool {
	var out []Pool
	for i := range nps {
		np := &nps[i]
		if !np.DeletionTimestamp.IsZero() {
			continue
		}
		if !cloudprovider.Manages(cloud, np.Spec.Template.Spec.NodeClassRef) {
			continue
		}
		if np.Spec.Replicas != nil {
			// A static pool keeps its replica count whatever is pending; pending pods never buy
			// machines from it (Karpenter's rule for spec.replicas).
			continue
		}
		types, err := cloud.GetInstanceTypes(ctx, np)
		if err != nil {
			log.FromContext(ctx).Info("skipping nodepool: no instance types", "NodePool", klog.KObj(np), "error", err.Error())
			continue
		}
		reqs, err := nodepools.Requirements(np)
		if err != nil {
			log.FromContext(ctx).Info("skipping nodepool: invalid requirements", "NodePool", klog.KObj(np), "error", err.Error())
			continue
		}
		cost, err := nodepools.NodeCost(np, nodeCost)
		if err != nil {
			log.FromContext(ctx).Info("skipping nodepool: invalid per-node cost", "NodePool", klog.KObj(np), "error", err.Error())
			continue
		}
		weight := int32(0)
		if np.Spec.Weight != nil {
			weight = *np.Spec.Weight
		}
		out = append(out, Pool{NodePool: np, Solver: solver.NodePool{
			Name: np.Name, Weight: weight, Requirements: reqs,
			Taints: np.Spec.Template.Spec.Taints, StartupTaints: np.Spec.Template.Spec.StartupTaints,
			InstanceTypes: types, Remaining: remaining(np, claims, types), NodeCost: cost,
		}})
	}
	return out
}

// remaining is what is left of a NodePool's limits after its NodeClaims: a launched claim counts
// its capacity, one not yet launched the largest capacity it may launch as.
func remaining(np *karpv1.NodePool, claims []karpv1.NodeClaim, types []*cloudprovider.InstanceType) corev1.ResourceList {
	if np.Spec.Limits == nil {
		return nil
	}
	left := np.Spec.Limits.DeepCopy()
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
