package planning

import (
	"context"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/solver"
)

// State is what provisioning reads of the cluster, in the solver's terms.
type State struct {
	// Pools are the NodePools new machines may come from (Pools); ByName finds them.
	Pools  []solver.NodePool
	ByName map[string]*karpv1.NodePool
	// Nodes are the registered nodes, then the in-flight NodeClaims (no Node yet).
	Nodes         []solver.ExistingNode
	DaemonSetPods []*corev1.Pod
	// InFlight indexes, by claim name, the Nodes that are NodeClaims without a Node yet.
	InFlight map[string]int
	// Registered are the NodeClaims whose Node has registered, by name; ClaimNode indexes their
	// Nodes in Nodes.
	Registered map[string]bool
	ClaimNode  map[string]int
	// Inputs fingerprints the NodePools, DaemonSets and LimitRanges (planning.Inputs).
	Inputs string
	// SpendingLeft is what is left of the cluster's spending limit (SpendingLeft); nil: none.
	SpendingLeft *float64
	// PoolErrors are the NodePools left out of Pools with an error (logged too).
	PoolErrors []*PoolError
}

// Settings are the operator's settings planning reads.
type Settings struct {
	// NodeCost is the per-node cost of pools without their own (NODE_COST).
	NodeCost float64
	// SpendingLimit is the cluster's spending limit in dollars per hour (SPENDING_LIMIT; 0: none).
	SpendingLimit float64
}

// ReadState lists the NodePools, NodeClaims (passed through claims, which may add the ones the
// caller created and its cache does not list yet; nil: as listed), Nodes, DaemonSets and
// LimitRanges, and builds the solver's view: the pools with their instance types and limits left, every node
// with the pods bound there (bound, by node name) and the pods moving to it, and the in-flight
// claims as nodes.
func ReadState(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, set Settings, bound map[string][]*corev1.Pod,
	claims func([]karpv1.NodeClaim) []karpv1.NodeClaim) (*State, error) {
	st := &State{ByName: map[string]*karpv1.NodePool{}, InFlight: map[string]int{}, Registered: map[string]bool{}, ClaimNode: map[string]int{}}
	nps := &karpv1.NodePoolList{}
	if err := c.List(ctx, nps); err != nil {
		return nil, fmt.Errorf("listing nodepools: %w", err)
	}
	ncs := &karpv1.NodeClaimList{}
	if err := c.List(ctx, ncs); err != nil {
		return nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	if claims != nil {
		ncs.Items = claims(ncs.Items)
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	dss := &appsv1.DaemonSetList{}
	if err := c.List(ctx, dss); err != nil {
		return nil, fmt.Errorf("listing daemonsets: %w", err)
	}
	lrs := &corev1.LimitRangeList{}
	if err := c.List(ctx, lrs); err != nil {
		return nil, fmt.Errorf("listing limitranges: %w", err)
	}
	st.DaemonSetPods = DaemonSetPods(dss.Items, bound, lrs.Items)
	st.Inputs = Inputs(nps.Items, dss.Items, lrs.Items)

	pools, poolErrs := readPools(ctx, cloud, set.NodeCost, nps.Items, ncs.Items)
	st.PoolErrors = poolErrs
	st.SpendingLeft = SpendingLeft(set.SpendingLimit, pools, ncs.Items)
	its := map[string][]*cloudprovider.InstanceType{}
	for _, pool := range pools {
		st.ByName[pool.NodePool.Name] = pool.NodePool
		st.Pools = append(st.Pools, pool.Solver)
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
		nodeIndex[n.Name] = len(st.Nodes)
		nc := claimByProvider[n.Spec.ProviderID]
		st.Nodes = append(st.Nodes, solver.ExistingNode{
			Name: n.Name, Labels: n.Labels, Taints: nodeclaims.SchedulingTaints(n, nc), Allocatable: n.Status.Allocatable,
			Pods: bound[n.Name],
			// A node going away (GoingAway) takes no pod, though its drain may not have tainted it yet.
			Unschedulable: n.Spec.Unschedulable || !n.DeletionTimestamp.IsZero() || nc != nil && !nc.DeletionTimestamp.IsZero(),
		})
	}
	// In-flight NodeClaims: launched or not, their node has not registered yet. Pods planned
	// for them are still pending and will be placed on them again.
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		if n := byProvider[nc.Status.ProviderID]; nc.Status.ProviderID != "" && n != nil {
			st.Registered[nc.Name] = true
			st.ClaimNode[nc.Name] = nodeIndex[n.Name]
			continue
		}
		if !nc.DeletionTimestamp.IsZero() {
			continue
		}
		if en, ok := nodeclaims.InFlight(nc, its[nc.Labels[karpv1.NodePoolLabelKey]], st.DaemonSetPods); ok {
			st.InFlight[nc.Name] = len(st.Nodes)
			st.Nodes = append(st.Nodes, en)
		}
	}
	st.reserve(ncs.Items, bound, nodeIndex, byProvider)
	return st, nil
}

// reserve counts, on each disruption replacement (in flight or registered), the pods its command
// moves there that still run on the nodes it replaces (nodeclaims.ReservedPods).
func (st *State) reserve(claims []karpv1.NodeClaim, bound map[string][]*corev1.Pod, nodeIndex map[string]int, byProvider map[string]*corev1.Node) {
	var byUID map[types.UID]*corev1.Pod
	for i := range claims {
		nc := &claims[i]
		if nc.Annotations[nodeclaims.ReservedPodsAnnotationKey] == "" || !nc.DeletionTimestamp.IsZero() {
			continue
		}
		idx, ok := st.InFlight[nc.Name]
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
			en := &st.Nodes[idx]
			en.Pods = append(slices.Clip(en.Pods), pods...)
			en.Requested = nil
		}
	}
}
