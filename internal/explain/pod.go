// Package explain answers a user's "why" about Capstan's decisions from the code that makes
// them: planning's view of the cluster and the solver, run read-only on what the cluster holds
// now. It is what `kubectl capstan explain` prints.
package explain

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/provreq"
	"capstan.dev/capstan/internal/solver"
)

// PodAnswer says where a pod runs, or why it is pending and what would make it fit.
type PodAnswer struct {
	// Pod is namespace/name.
	Pod string `json:"pod"`
	// Node is the node the pod is bound to; empty while it is pending.
	Node string `json:"node,omitempty"`
	// NodeClaim and NodePool are the node's claim and pool, when Capstan (or Karpenter) made it.
	NodeClaim string `json:"nodeClaim,omitempty"`
	NodePool  string `json:"nodePool,omitempty"`
	// Provisionable says whether provisioning acts on the pending pod (unbound, not gated, marked
	// unschedulable by its scheduler or not tried yet by the default one); a pending pod that is
	// not is waiting for something else, said in Waiting.
	Provisionable bool   `json:"provisionable,omitempty"`
	Waiting       string `json:"waiting,omitempty"`
	// FitsOn is the existing node, or in-flight NodeClaim, with room for the pending pod now.
	FitsOn string `json:"fitsOn,omitempty"`
	// Launch is what provisioning would launch for the pod alone: the NodePool and the instance
	// types, cheapest first.
	Launch *Launch `json:"launch,omitempty"`
	// Misses say, per NodePool and closest first, why none can launch a machine for the pod;
	// Closest is the one it got furthest with. Empty when the pod fits somewhere.
	Misses  []solver.PoolMiss `json:"nodePools,omitempty"`
	Closest *solver.PoolMiss  `json:"closest,omitempty"`
	// Reason is the solver's whole answer for a pod that fits nowhere.
	Reason string `json:"reason,omitempty"`
	// Leaving says the pod runs on a node going away (its Node or NodeClaim is being deleted);
	// FitsOn or Launch then say where provisioning plans it once it leaves, or Reason why nowhere.
	Leaving bool `json:"leaving,omitempty"`
	// Held are the NodeClaims bought for the pod whose nodes came up without it, when provisioning
	// buys no more for it (planning.MissedAnnotationKey); HeldReason says why and until when.
	Held       []string `json:"heldAfter,omitempty"`
	HeldReason string   `json:"heldReason,omitempty"`
}

// Launch is a machine provisioning would launch.
type Launch struct {
	NodePool      string   `json:"nodePool"`
	InstanceTypes []string `json:"instanceTypes"`
	// Price is the cheapest type's offering price, plus the pool's per-node cost ($/h).
	Price float64 `json:"price"`
}

// Pod explains one pod: where it runs, or — pending — whether an existing node has room, what
// provisioning would launch for it, or per NodePool why nothing can. The solve is provisioning's
// own (planning.ReadState, the solver with default options) for this pod alone, so pods pending
// with it are not counted, and a volume's zone is not applied.
func Pod(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, set planning.Settings, pod *corev1.Pod, now time.Time) (*PodAnswer, error) {
	a := &PodAnswer{Pod: pod.Namespace + "/" + pod.Name, Node: pod.Spec.NodeName}
	if pod.Spec.NodeName != "" {
		going, err := a.claimOf(ctx, c, pod)
		if err != nil || !going.Nodes[pod.Spec.NodeName] || !planning.Leaves(pod, going.Reserved) || pods.HasDRARequirements(pod) {
			return a, err
		}
		a.Leaving = true
		return a, a.place(ctx, c, cloud, set, pod, now, going)
	}
	a.Provisionable = planning.Provisionable(pod)
	switch {
	case !pod.DeletionTimestamp.IsZero():
		a.Waiting = "the pod is being deleted"
	case len(pod.Spec.SchedulingGates) > 0:
		a.Waiting = fmt.Sprintf("the pod has scheduling gates (%s): provisioning waits until they are removed", pod.Spec.SchedulingGates[0].Name)
	case !a.Provisionable && pod.Spec.SchedulerName != "" && pod.Spec.SchedulerName != corev1.DefaultSchedulerName:
		a.Waiting = fmt.Sprintf("the pod's scheduler %s has not marked it unschedulable yet", pod.Spec.SchedulerName)
	case pods.HasDRARequirements(pod):
		a.Waiting = "the pod has Dynamic Resource Allocation requirements: Capstan buys no machine for it (IGNORE_DRA_REQUESTS=true, as Karpenter), the kube-scheduler places it where DRA drivers offer its devices"
		return a, nil
	}
	return a, a.place(ctx, c, cloud, set, pod, now, planning.Going{})
}

// place answers where provisioning plans the pod (pending, or leaving a node going away: the
// pods of those nodes are taken off them, as provisioning takes them).
func (a *PodAnswer) place(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, set planning.Settings, pod *corev1.Pod,
	now time.Time, going planning.Going) error {
	list := &corev1.PodList{}
	if err := c.List(ctx, list); err != nil {
		return fmt.Errorf("listing pods: %w", err)
	}
	_, bound := planning.SplitPods(list.Items)
	going.TakeLeaving(bound)
	var claims []karpv1.NodeClaim
	st, err := planning.ReadState(ctx, c, cloud, set, bound, func(listed []karpv1.NodeClaim) []karpv1.NodeClaim {
		claims = listed
		return listed
	})
	if err != nil {
		return err
	}
	for _, e := range st.PoolErrors {
		if err := cloudFailure(e.NodePool, e.Why, e.Err); err != nil {
			return err
		}
	}
	booked := planning.Booked(st, claims, now)
	if req, ok := provreq.Consumes(pod); ok && booked[req] > 0 && !a.Leaving {
		a.Waiting = fmt.Sprintf("the pod consumes ProvisioningRequest %s, whose %d machine(s) are kept for its pods: provisioning buys it no other, the kube-scheduler binds it there once they register", req, booked[req])
		return nil
	}
	if missed := planning.Missed(pod, st.Inputs); len(missed) >= planning.MaxMissedMachines {
		a.Held, a.HeldReason = missed, planning.HeldMessage(missed)
	}
	r := solver.Solve(solver.Input{Pods: []*corev1.Pod{pod}, NodePools: st.Pools, Nodes: st.Nodes, DaemonSetPods: st.DaemonSetPods,
		WellKnownLabels: cloud.WellKnownLabels(), SpendingLeft: st.SpendingLeft}, solver.Options{})
	switch {
	case len(r.Bindings) > 0:
		a.FitsOn = r.Bindings[0].Node
	case len(r.NodeClaims) > 0:
		nc := r.NodeClaims[0]
		its := make([]string, 0, len(nc.InstanceTypes))
		for _, it := range nc.InstanceTypes {
			its = append(its, it.Name)
		}
		a.Launch = &Launch{NodePool: nc.NodePool, InstanceTypes: its, Price: nc.Price}
	case len(r.Unschedulable) > 0:
		u := r.Unschedulable[0]
		a.Reason, a.Misses = u.Reason, u.Ranked()
		if c, ok := u.Closest(); ok {
			a.Closest = &c
		}
	}
	return nil
}

// claimOf finds the NodeClaim and NodePool of the pod's node, and returns which nodes are going
// away.
func (a *PodAnswer) claimOf(ctx context.Context, c client.Reader, pod *corev1.Pod) (planning.Going, error) {
	ncs := &karpv1.NodeClaimList{}
	if err := c.List(ctx, ncs); err != nil {
		return planning.Going{}, fmt.Errorf("listing nodeclaims: %w", err)
	}
	for i := range ncs.Items {
		if nc := &ncs.Items[i]; nc.Status.NodeName == pod.Spec.NodeName {
			a.NodeClaim, a.NodePool = nc.Name, nc.Labels[karpv1.NodePoolLabelKey]
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes); err != nil {
		return planning.Going{}, fmt.Errorf("listing nodes: %w", err)
	}
	return planning.GoingAway(nodes.Items, ncs.Items), nil
}

// Hint is what would let a NodePool take a pod that failed the stage's check.
func Hint(s solver.MissStage) string {
	switch s {
	case solver.MissTaint:
		return "add a toleration for the taint to the pod, or use a NodePool without it"
	case solver.MissRequirements:
		return "make the pod's node selector or affinity and the NodePool's requirements overlap, with an instance type in the overlap"
	case solver.MissResources:
		return "request less, or let the NodePool use larger instance types"
	case solver.MissLimits:
		return "raise the NodePool's spec.limits, or free capacity in it"
	case solver.MissPlacement:
		return "relax the pod's topology spread or affinity, or the NodePool's minValues"
	}
	return ""
}

// WriteText prints the answer for a person.
func (a *PodAnswer) WriteText(w io.Writer) error {
	var b strings.Builder
	switch {
	case a.Leaving:
		a.writeLeaving(&b)
	case a.Node != "" && a.NodeClaim != "":
		fmt.Fprintf(&b, "Pod %s runs on node %s, of NodeClaim %s (NodePool %s).\n", a.Pod, a.Node, a.NodeClaim, a.NodePool)
	case a.Node != "":
		fmt.Fprintf(&b, "Pod %s runs on node %s, which no NodeClaim manages.\n", a.Pod, a.Node)
	case a.Waiting != "":
		fmt.Fprintf(&b, "Pod %s is pending: %s.\n", a.Pod, a.Waiting)
	case a.FitsOn != "":
		fmt.Fprintf(&b, "Pod %s is pending; node %s has room for it now: the scheduler binds it there (Capstan launches nothing).\n", a.Pod, a.FitsOn)
	case a.Launch != nil && len(a.Held) > 0:
		fmt.Fprintf(&b, "Pod %s is pending and held: it %s.\n"+
			"Without the hold it would launch from NodePool %s: %s (%.4f $/h).\n",
			a.Pod, strings.TrimPrefix(a.HeldReason, "Pod "), a.Launch.NodePool, typeList(a.Launch.InstanceTypes), a.Launch.Price)
	case a.Launch != nil:
		fmt.Fprintf(&b, "Pod %s is pending; provisioning launches a machine for it from NodePool %s: %s (%.4f $/h).\n",
			a.Pod, a.Launch.NodePool, typeList(a.Launch.InstanceTypes), a.Launch.Price)
	case a.Closest != nil:
		fmt.Fprintf(&b, "Pod %s is pending: no NodePool can launch a machine for it.\n", a.Pod)
		fmt.Fprintf(&b, "Closest: NodePool %s (%s): %s.\nTo fit there: %s.\n\n", a.Closest.NodePool, a.Closest.Stage, a.Closest.Reason, Hint(a.Closest.Stage))
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NODEPOOL\tFAILED CHECK\tREASON")
		for _, m := range a.Misses {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", m.NodePool, m.Stage, m.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	default:
		fmt.Fprintf(&b, "Pod %s is pending: %s.\n", a.Pod, a.Reason)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLeaving says where a pod of a node going away goes once it leaves.
func (a *PodAnswer) writeLeaving(b *strings.Builder) {
	on := "node " + a.Node
	if a.NodeClaim != "" {
		on += fmt.Sprintf(", of NodeClaim %s (NodePool %s),", a.NodeClaim, a.NodePool)
	}
	fmt.Fprintf(b, "Pod %s runs on %s which is going away.\n", a.Pod, on)
	switch {
	case strings.HasPrefix(a.FitsOn, nodeclaims.InFlightPrefix):
		fmt.Fprintf(b, "Once it leaves it goes to %s, launched for it (or with room for it) while its node drains.\n", a.FitsOn)
	case a.FitsOn != "":
		fmt.Fprintf(b, "Once it leaves, node %s has room for it (Capstan launches nothing).\n", a.FitsOn)
	case a.Launch != nil:
		fmt.Fprintf(b, "Provisioning launches a machine for it now, before it leaves, from NodePool %s: %s (%.4f $/h).\n",
			a.Launch.NodePool, typeList(a.Launch.InstanceTypes), a.Launch.Price)
	case a.Closest != nil:
		fmt.Fprintf(b, "No NodePool can launch a machine for it once it leaves. Closest: NodePool %s (%s): %s.\nTo fit there: %s.\n",
			a.Closest.NodePool, a.Closest.Stage, a.Closest.Reason, Hint(a.Closest.Stage))
	default:
		fmt.Fprintf(b, "Once it leaves it fits nowhere: %s.\n", a.Reason)
	}
}

func typeList(its []string) string {
	const show = 5
	if len(its) <= show {
		return strings.Join(its, ", ")
	}
	return fmt.Sprintf("%s and %d other(s)", strings.Join(its[:show], ", "), len(its)-show)
}

// cloudFailure is the error explain fails with when a pool was left out because the cloud
// provider could not read its instance types or prices (its NodeClass ready): an answer without
// that pool would be wrong, so explain names the cloud's error rather than say no NodePool fits.
// A NodeClass not ready, or any other reason, is an answer: nil.
func cloudFailure(pool, why string, err error) error {
	if err == nil || why != planning.WhyNoInstanceTypes || cloudprovider.IsNodeClassNotReady(err) {
		return nil
	}
	return fmt.Errorf("reading the instance types of nodepool %s: %w", pool, err)
}
