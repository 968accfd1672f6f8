package disruption

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/nodeclaims"
)

// annotate sets (or, with value "", removes) the command annotation of a claim
// (setAnnotation).
func (c *Controller) annotate(ctx context.Context, nc *karpv1.NodeClaim, value string) error {
	_, err := c.setAnnotation(ctx, nc, CommandAnnotationKey, value)
	return err
}

// setAnnotation sets (or, with value "", removes) an annotation of a claim, reading it fresh (the
// cache's copy may be a write behind: the pod-event controller stamps claims often) and retrying
// on conflicts, and returns the claim as written (nil when it is gone). Setting fails when the
// claim is being deleted or gone; removing from a claim that is gone does nothing.
func (c *Controller) setAnnotation(ctx context.Context, nc *karpv1.NodeClaim, key, value string) (*karpv1.NodeClaim, error) {
	var cur *karpv1.NodeClaim
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur = &karpv1.NodeClaim{}
		if err := c.APIReader.Get(ctx, client.ObjectKeyFromObject(nc), cur); err != nil {
			cur = nil
			if value == "" {
				return client.IgnoreNotFound(err)
			}
			return fmt.Errorf("reading nodeclaim %s: %w", nc.Name, err)
		}
		if !cur.DeletionTimestamp.IsZero() && value != "" {
			return fmt.Errorf("nodeclaim %s is being deleted", nc.Name)
		}
		orig := cur.DeepCopy()
		if value == "" {
			if _, ok := cur.Annotations[key]; !ok {
				return nil
			}
			delete(cur.Annotations, key)
		} else {
			if cur.Annotations == nil {
				cur.Annotations = map[string]string{}
			}
			cur.Annotations[key] = value
		}
		if err := c.Client.Patch(ctx, cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return fmt.Errorf("patching nodeclaim %s: %w", nc.Name, err)
		}
		return nil
	})
	return cur, err
}

// taint adds (or removes) karpenter.sh/disrupted:NoSchedule on the node; a node that is gone
// needs nothing.
func (c *Controller) taint(ctx context.Context, name string, on bool) error {
	return c.setTaint(ctx, name, karpv1.DisruptedNoScheduleTaint, on)
}

// setTaint adds (or removes) the taint on the node; a node that is gone needs nothing.
func (c *Controller) setTaint(ctx context.Context, name string, taint corev1.Taint, on bool) error {
	if name == "" {
		return nil
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node := &corev1.Node{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return client.IgnoreNotFound(err)
		}
		if nodeclaims.HasTaint(node, &taint) == on {
			return nil
		}
		orig := node.DeepCopy()
		if on {
			node.Spec.Taints = append(node.Spec.Taints, taint)
		} else {
			node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&taint) })
		}
		if err := c.Client.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("patching taints of node %s: %w", name, err)
		}
		return nil
	})
}

// rollback undoes a command that cannot finish: its candidates are un-tainted and their
// annotation removed, with an event on each saying why, and its replacements are kept as
// ordinary capacity (release). Errors are logged; the next round finds what is left and rolls it
// back again.
func (c *Controller) rollback(ctx context.Context, st *commandState, why string) {
	logger := log.FromContext(ctx).WithValues("command", st.ID, "method", st.Method)
	logger.Info("rolling back disruption command", "reason", why, "nodeclaims", st.candidates, "replacements", st.Replacements)
	for _, name := range st.Replacements {
		if err := c.release(ctx, name, why); err != nil {
			logger.Error(err, "releasing replacement", "NodeClaim", name)
		}
	}
	for _, name := range st.candidates {
		nc := &karpv1.NodeClaim{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, nc); err != nil {
			continue
		}
		// Un-taint first: a restart in between finds the annotation and rolls back again.
		if err := c.taint(ctx, nc.Status.NodeName, false); err != nil {
			logger.Error(err, "un-tainting node", "NodeClaim", klog.KObj(nc))
			continue
		}
		if err := c.annotate(ctx, nc, ""); err != nil {
			logger.Error(err, "removing the command annotation", "NodeClaim", klog.KObj(nc))
			continue
		}
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "DisruptionFailed", "Disrupt", "Disruption %s/%s rolled back: %s", st.Reason, st.Method, why)
	}
	c.markDone(st.ID)
	c.backoffUntil = c.Clock.Now().Add(c.Options.withDefaults().FailureBackoff)
}

// untaintStray removes the disrupted taint from nodes whose claim is neither being deleted nor
// part of a command: a command rolled back or lost before it was recorded.
func (c *Controller) untaintStray(ctx context.Context, ncs []karpv1.NodeClaim, commands map[string]*commandState) error {
	inCommand := map[string]bool{}
	for _, st := range commands {
		for _, n := range st.candidates {
			inCommand[n] = true
		}
	}
	nodes := &corev1.NodeList{}
	if err := c.Client.List(ctx, nodes, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing nodes: %w", err)
	}
	byProvider := map[string]*karpv1.NodeClaim{}
	for i := range ncs {
		if id := ncs[i].Status.ProviderID; id != "" {
			byProvider[id] = &ncs[i]
		}
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !nodeclaims.Disrupted(n) {
			continue
		}
		nc := byProvider[n.Spec.ProviderID]
		if nc == nil || !nc.DeletionTimestamp.IsZero() || !n.DeletionTimestamp.IsZero() || inCommand[nc.Name] {
			continue
		}
		if _, ok := nc.Annotations[CommandAnnotationKey]; ok {
			continue
		}
		log.FromContext(ctx).Info("removing a disruption taint no command owns", "Node", klog.KObj(n), "NodeClaim", klog.KObj(nc))
		if err := c.taint(ctx, n.Name, false); err != nil {
			return err
		}
	}
	return nil
}

// report emits the decision's explanations as events (once per node and message), and its
// metrics.
func (c *Controller) report(ctx context.Context, snap *disruptionplan.Snapshot, dec *disruptionplan.Decision) {
	if c.told == nil {
		c.told = map[string]string{}
	}
	exists := map[string]bool{}
	for _, n := range snap.Nodes {
		exists[n.NodeClaim.Name] = true
	}
	for _, e := range dec.Explanations {
		name := e.Node.NodeClaim.Name
		if e.Event == "" || c.told[name] == e.Message {
			continue
		}
		c.told[name] = e.Message
		// The blocker's kind and message key the action: the events API merges events that share
		// type, reason and action into one series and keeps the first message (see eventkey).
		action := eventkey.Action(e.Kind, e.Message)
		c.Recorder.Eventf(e.Node.NodeClaim, nil, corev1.EventTypeNormal, e.Event, action, "%s", e.Message)
		if e.Node.Node != nil {
			c.Recorder.Eventf(e.Node.Node, nil, corev1.EventTypeNormal, e.Event, action, "%s", e.Message)
		}
		log.FromContext(ctx).V(1).Info("not disrupting node", "NodeClaim", klog.KObj(e.Node.NodeClaim), "event", e.Event, "reason", e.Message)
	}
	for name := range c.told {
		if !exists[name] {
			delete(c.told, name)
		}
	}
	eligible := map[string]int{}
	for r, n := range dec.Eligible {
		eligible[string(r)] = n
	}
	allowed := map[string]map[string]int{}
	for pool, byReason := range dec.Allowances {
		allowed[pool] = map[string]int{}
		for r, a := range byReason {
			allowed[pool][strings.ToLower(string(r))] = a.Allowed
		}
	}
	c.Metrics.DisruptionRound(eligible, allowed)
}

// plan marks the decision's planned nodes (disruptionplan.Decision.Planned) with
// nodeclaims.PlannedTaint and clears it from every other node of the pools, unless the decision
// keeps the marks of an earlier round. Failures are logged; the next round tries again.
func (c *Controller) plan(ctx context.Context, snap *disruptionplan.Snapshot, dec *disruptionplan.Decision) {
	if dec.KeepPlanned {
		return
	}
	want := map[string]bool{}
	for _, n := range dec.Planned {
		if n.Node != nil {
			want[n.Node.Name] = true
		}
	}
	for _, n := range snap.Nodes {
		if n.Node == nil || nodeclaims.Planned(n.Node) == want[n.Node.Name] {
			continue
		}
		if err := c.setTaint(ctx, n.Node.Name, nodeclaims.PlannedTaint, want[n.Node.Name]); err != nil {
			log.FromContext(ctx).Error(err, "marking node planned for consolidation", "Node", n.Node.Name, "planned", want[n.Node.Name])
		}
	}
}

// release keeps a rolled-back command's replacement as any other machine, as Karpenter does: one
// that is late may still come up and take pods, and one that never initializes stays to be
// looked at (no disruption moves pods onto it; expireAfter, repair or a person removes it). It
// no longer holds room for the pods that were to move (the reserved-pods annotation goes), and
// an event on it says why it is there. A replacement that is gone needs nothing.
func (c *Controller) release(ctx context.Context, name, why string) error {
	nc, err := c.setAnnotation(ctx, &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name}}, nodeclaims.ReservedPodsAnnotationKey, "")
	if err != nil || nc == nil {
		return err
	}
	if nc.DeletionTimestamp.IsZero() {
		c.Recorder.Eventf(nc, nil, corev1.EventTypeWarning, "DisruptionFailed", "Disrupt",
			"Kept: the disruption it was launched for was rolled back: %s", why)
	}
	return nil
}
