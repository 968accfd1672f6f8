package disruption

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruption"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/solver"
)

// Snapshot reads the cluster from the cache as a round does, without the churn guard's evictions
// (which only this controller's rounds read): the pod deletion-cost ranking's view. It may run
// concurrently with rounds.
func (c *Controller) Snapshot(ctx context.Context) (*disruption.Snapshot, error) {
	return c.snapshot(ctx, c.Options.withDefaults(), nil)
}

// snapshot reads the cluster from the cache, in the decision core's terms. Claims, nodes and pods
// are the cache's own objects, not copies (a round every 10 s copied every pod of the cluster):
// the decision core and the solver only read them, and every write here reads its object again.
func (c *Controller) snapshot(ctx context.Context, opts Options, evictions []disruption.Eviction) (*disruption.Snapshot, error) {
	nps := &karpv1.NodePoolList{}
	if err := c.Client.List(ctx, nps); err != nil {
		return nil, fmt.Errorf("listing nodepools: %w", err)
	}
	ncs := &karpv1.NodeClaimList{}
	if err := c.Client.List(ctx, ncs, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodeclaims: %w", err)
	}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	pdbs := &policyv1.PodDisruptionBudgetList{}
	if err := c.Client.List(ctx, pdbs); err != nil {
		return nil, fmt.Errorf("listing poddisruptionbudgets: %w", err)
	}
	dss := &appsv1.DaemonSetList{}
	if err := c.Client.List(ctx, dss); err != nil {
		return nil, fmt.Errorf("listing daemonsets: %w", err)
	}
	rss := &appsv1.ReplicaSetList{}
	if err := c.Client.List(ctx, rss, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing replicasets: %w", err)
	}
	sss := &appsv1.StatefulSetList{}
	if err := c.Client.List(ctx, sss, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing statefulsets: %w", err)
	}
	nss := &corev1.NamespaceList{}
	if err := c.Client.List(ctx, nss); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}

	snap := &disruption.Snapshot{Now: c.Clock.Now(), DaemonSetPods: planning.DaemonSetPods(dss.Items),
		WellKnownLabels: c.Cloud.WellKnownLabels(), NamespaceLabels: map[string]map[string]string{}, Evictions: evictions}
	wait := opts.Decision.ScaleDownWait
	if wait <= 0 {
		wait = disruption.DefaultScaleDownWait
	}
	snap.ScaleDowns = c.scaleDowns.observe(snap.Now, wait, append(replicaSets(rss.Items), statefulSets(sss.Items)...))
	for i := range nss.Items {
		snap.NamespaceLabels[nss.Items[i].Name] = nss.Items[i].Labels
	}
	for i := range pdbs.Items {
		snap.PDBs = append(snap.PDBs, &pdbs.Items[i])
	}
	managed := map[string]bool{}
	for _, p := range planning.Pools(ctx, c.Cloud, opts.NodeCost, nps.Items, ncs.Items) {
		snap.NodePools = append(snap.NodePools, disruption.Pool{NodePool: p.NodePool, Solver: p.Solver})
		managed[p.NodePool.Name] = true
	}

	bound := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		switch {
		case planning.Provisionable(p):
			snap.Pending = append(snap.Pending, p)
		case p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
			bound[p.Spec.NodeName] = append(bound[p.Spec.NodeName], p)
		}
	}
	byProvider := map[string]*corev1.Node{}
	for i := range nodes.Items {
		if id := nodes.Items[i].Spec.ProviderID; id != "" {
			byProvider[id] = &nodes.Items[i]
		}
	}
	owned, claimedIDs := map[string]bool{}, map[string]bool{}
	for i := range ncs.Items {
		claimedIDs[ncs.Items[i].Status.ProviderID] = true
	}
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		if !managed[nc.Labels[karpv1.NodePoolLabelKey]] {
			continue
		}
		n := &disruption.Node{NodeClaim: nc}
		if nc.Status.ProviderID != "" {
			n.Node = byProvider[nc.Status.ProviderID]
		}
		if n.Node != nil {
			n.Pods = bound[n.Node.Name]
			owned[n.Node.Name] = true
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		// Nodes of pools not managed here (static, being deleted) are not room pods may move to.
		if owned[n.Name] || n.Spec.ProviderID != "" && claimedIDs[n.Spec.ProviderID] {
			continue
		}
		snap.OtherNodes = append(snap.OtherNodes, solver.ExistingNode{Name: n.Name, Labels: n.Labels, Taints: n.Spec.Taints,
			Allocatable: n.Status.Allocatable, Pods: bound[n.Name], Unschedulable: n.Spec.Unschedulable || !n.DeletionTimestamp.IsZero()})
	}
	return snap, nil
}
