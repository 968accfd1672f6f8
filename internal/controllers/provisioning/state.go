package provisioning

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/planning"
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
	st.daemons = planning.DaemonSetPods(dss.Items)

	pools := planning.Pools(ctx, p.Cloud, p.NodeCost, nps.Items, ncs.Items)
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
