// Package snapshot reads the cluster into the disruption decision core's Snapshot, for the
// disruption controller, the deletion-cost ranking and the explain tools alike, and remembers the
// scale-downs it has seen.
package snapshot

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/solver"
)

// Options say how to read the cluster.
type Options struct {
	// Now is the snapshot's time.
	Now time.Time
	// Settings are Capstan's settings planning reads (NODE_COST, SPENDING_LIMIT).
	planning.Settings
	// ScaleDownWait is how long a scale-down is waited for (disruptionplan.DefaultScaleDownWait when
	// zero); ScaleDowns remembers owners seen shrinking across reads (nil: a fresh memory, which
	// sees only owners with more replicas than they want).
	ScaleDownWait time.Duration
	ScaleDowns    *ScaleDowns
	// Evictions are the churn guard's record of recent evictions.
	Evictions []disruptionplan.Eviction
	// Buffers are the CapacityBuffers' virtual pods (nil: none).
	Buffers func(context.Context) ([]*corev1.Pod, error)
	// DefaultSpread gives the pods that may move (pending, and those of the nodes Capstan
	// manages) the cluster's default topology spread constraints (SCHEDULER_CONFIG); nil gives
	// none.
	DefaultSpread *defaultspread.Applier
	// Shared lists claims, nodes, pods and owners as the reader's own objects, not copies: for a
	// cache whose objects the caller only reads (a round every 10 s copied every pod of the
	// cluster). False for a reader that is not a cache.
	Shared bool
}

// Read lists what the decision core needs and builds its Snapshot: the NodePools new machines
// may come from (planning.Pools), every NodeClaim of those pools with its Node and pods, the
// other nodes, the pending pods, PodDisruptionBudgets, DaemonSets, namespaces' labels and the
// scale-downs in progress. The disruption controller and `kubectl capstan explain` both read
// with it.
func Read(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, o Options) (*disruptionplan.Snapshot, error) {
	l, err := readLists(ctx, c, o.Shared)
	if err != nil {
		return nil, err
	}
	snap := &disruptionplan.Snapshot{Now: o.Now,
		WellKnownLabels: cloud.WellKnownLabels(), NamespaceLabels: map[string]map[string]string{}, Evictions: o.Evictions}
	wait := o.ScaleDownWait
	if wait <= 0 {
		wait = disruptionplan.DefaultScaleDownWait
	}
	sd := o.ScaleDowns
	if sd == nil {
		sd = &ScaleDowns{}
	}
	snap.ScaleDowns = sd.observe(snap.Now, wait, append(replicaSets(l.rss.Items), statefulSets(l.sss.Items)...))
	for i := range l.nss.Items {
		snap.NamespaceLabels[l.nss.Items[i].Name] = l.nss.Items[i].Labels
	}
	for i := range l.pdbs.Items {
		snap.PDBs = append(snap.PDBs, &l.pdbs.Items[i])
	}
	managed := map[string]bool{}
	pools := planning.Pools(ctx, cloud, o.NodeCost, l.nps.Items, l.ncs.Items)
	for _, p := range pools {
		snap.NodePools = append(snap.NodePools, disruptionplan.Pool{NodePool: p.NodePool, Solver: p.Solver})
		managed[p.NodePool.Name] = true
	}
	snap.SpendingLeft = planning.SpendingLeft(o.SpendingLimit, pools, l.ncs.Items)
	bound := map[string][]*corev1.Pod{}
	for i := range l.pods.Items {
		p := &l.pods.Items[i]
		switch {
		case planning.Provisionable(p):
			snap.Pending = append(snap.Pending, p)
		case p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
			bound[p.Spec.NodeName] = append(bound[p.Spec.NodeName], p)
		}
	}
	snap.DaemonSetPods = planning.DaemonSetPods(l.dss.Items, bound, l.lrs.Items)
	snap.Pending = o.DefaultSpread.Apply(ctx, snap.Pending)
	if o.Buffers != nil {
		buf, err := o.Buffers(ctx)
		if err != nil {
			return nil, err
		}
		snap.Buffer = o.DefaultSpread.Apply(ctx, buf)
	}
	addNodes(ctx, snap, l, managed, bound, o.DefaultSpread)
	return snap, nil
}

// lists are the objects a snapshot is built from.
type lists struct {
	nps   karpv1.NodePoolList
	ncs   karpv1.NodeClaimList
	nodes corev1.NodeList
	pods  corev1.PodList
	pdbs  policyv1.PodDisruptionBudgetList
	dss   appsv1.DaemonSetList
	rss   appsv1.ReplicaSetList
	sss   appsv1.StatefulSetList
	nss   corev1.NamespaceList
	lrs   corev1.LimitRangeList
}

// readLists lists the objects; with shared, the large lists are the reader's own objects.
func readLists(ctx context.Context, c client.Reader, shared bool) (*lists, error) {
	l := &lists{}
	for _, r := range []struct {
		list   client.ObjectList
		what   string
		shared bool
	}{
		{&l.nps, "nodepools", false}, {&l.ncs, "nodeclaims", true}, {&l.nodes, "nodes", true},
		{&l.pods, "pods", true}, {&l.pdbs, "poddisruptionbudgets", false}, {&l.dss, "daemonsets", false},
		{&l.rss, "replicasets", true}, {&l.sss, "statefulsets", true}, {&l.nss, "namespaces", false},
		{&l.lrs, "limitranges", false},
	} {
		var opts []client.ListOption
		if shared && r.shared {
			opts = append(opts, client.UnsafeDisableDeepCopy)
		}
		if err := c.List(ctx, r.list, opts...); err != nil {
			return nil, fmt.Errorf("listing %s: %w", r.what, err)
		}
	}
	return l, nil
}

// addNodes adds the managed pools' NodeClaims, each with its Node and pods, and the other nodes
// pods may move to.
func addNodes(ctx context.Context, snap *disruptionplan.Snapshot, l *lists, managed map[string]bool, bound map[string][]*corev1.Pod, spread *defaultspread.Applier) {
	byProvider := map[string]*corev1.Node{}
	for i := range l.nodes.Items {
		if id := l.nodes.Items[i].Spec.ProviderID; id != "" {
			byProvider[id] = &l.nodes.Items[i]
		}
	}
	owned, claimedIDs := map[string]bool{}, map[string]bool{}
	for i := range l.ncs.Items {
		claimedIDs[l.ncs.Items[i].Status.ProviderID] = true
	}
	for i := range l.ncs.Items {
		nc := &l.ncs.Items[i]
		if !managed[nc.Labels[karpv1.NodePoolLabelKey]] {
			continue
		}
		n := &disruptionplan.Node{NodeClaim: nc}
		if nc.Status.ProviderID != "" {
			n.Node = byProvider[nc.Status.ProviderID]
		}
		if n.Node != nil {
			n.Pods = spread.Apply(ctx, bound[n.Node.Name])
			owned[n.Node.Name] = true
		}
		snap.Nodes = append(snap.Nodes, n)
	}
	for i := range l.nodes.Items {
		n := &l.nodes.Items[i]
		// Nodes of pools not managed here (static, being deleted) are not room pods may move to.
		if owned[n.Name] || n.Spec.ProviderID != "" && claimedIDs[n.Spec.ProviderID] {
			continue
		}
		snap.OtherNodes = append(snap.OtherNodes, solver.ExistingNode{Name: n.Name, Labels: n.Labels, Taints: n.Spec.Taints,
			Allocatable: n.Status.Allocatable, Pods: bound[n.Name], Unschedulable: n.Spec.Unschedulable || !n.DeletionTimestamp.IsZero()})
	}
}
