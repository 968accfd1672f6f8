package termination

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/pods"
)

// drain evicts the node's pods, one priority group at a time (each group once the one before it
// is gone), and returns how many are left — or, evicting none, what it waits for first
// (awaitCapacity).
func (c *Controller) drain(ctx context.Context, nc *karpv1.NodeClaim, node *corev1.Node) (int, string, error) {
	onNode := &corev1.PodList{}
	if err := c.Client.List(ctx, onNode, client.MatchingFields{"spec.nodeName": node.Name}); err != nil {
		return 0, "", fmt.Errorf("listing pods of node %s: %w", node.Name, err)
	}
	groups := make([][]*corev1.Pod, 4)
	left := 0
	now := c.Clock.Now()
	for i := range onNode.Items {
		p := &onNode.Items[i]
		if !drainable(p, now) {
			continue
		}
		left++
		// The kubelet's graceful-shutdown order: ordinary pods, DaemonSet pods, system-critical
		// pods, system-critical DaemonSet pods.
		g := 0
		if pods.OwnedByDaemonSet(p) {
			g++
		}
		if critical(p) {
			g += 2
		}
		groups[g] = append(groups[g], p)
	}
	if awaiting, err := c.awaitCapacity(ctx, nc, node.Name, onNode.Items); err != nil || awaiting != "" {
		return left, awaiting, err
	}
	end := deadline(nc)
	for _, g := range groups {
		if len(g) == 0 {
			continue
		}
		// One pod's error does not stop the others; the claim is requeued with the errors.
		var errs []error
		for _, p := range g {
			if err := c.evict(ctx, nc, p, end); err != nil {
				errs = append(errs, err)
			}
		}
		// Later groups wait until this one is gone.
		return left, "", errors.Join(errs...)
	}
	return left, "", nil
}

// WaitForCapacity bounds how long a drain waits, before its first eviction, for the machines
// provisioning launched for the node's pods (capacityWait).
const WaitForCapacity = time.Minute

// capacityWait is how long after its deletion the claim's drain may wait for the machines
// launched for its pods: WaitForCapacity, or half its terminationGracePeriod when that is
// shorter (the wait must leave the pods their graceful eviction).
func capacityWait(nc *karpv1.NodeClaim) time.Duration {
	wait := WaitForCapacity
	if nc.Spec.TerminationGracePeriod != nil {
		wait = min(wait, nc.Spec.TerminationGracePeriod.Duration/2)
	}
	return wait
}

// awaitCapacity says what the drain waits for before its first eviction ("": nothing), while the
// claim's deletion is less than capacityWait old: provisioning to plan the node's pods, then the
// NodeClaims it launched for them to come up (initialized, or deleted for a failed launch). Provisioning plans the pods of a node going away as soon as it goes
// (planning.Going); evicted before their machines are up, they would wait pending for the launch
// they need. Waiting first, they move straight onto machines that are Ready — a PDB-limited drain
// moves each pod once its successor's room is up, not one launch at a time. A machine that fails
// to launch is deleted and no longer waited for; past capacityWait the drain goes on regardless.
func (c *Controller) awaitCapacity(ctx context.Context, nc *karpv1.NodeClaim, node string, onNode []corev1.Pod) (string, error) {
	if c.Capacity == nil || nc.DeletionTimestamp == nil || c.Clock.Since(nc.DeletionTimestamp.Time) >= capacityWait(nc) {
		return "", nil
	}
	var uids []types.UID
	for i := range onNode {
		if p := &onNode[i]; p.DeletionTimestamp.IsZero() {
			uids = append(uids, p.UID)
		}
	}
	claims, planned := c.Capacity.LaunchedFor(node, uids)
	if !planned {
		return "provisioning has planned them", nil
	}
	var awaiting []string
	for _, name := range claims {
		launched := &karpv1.NodeClaim{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, launched); apierrors.IsNotFound(err) {
			continue
		} else if err != nil {
			return "", fmt.Errorf("reading nodeclaim %s: %w", name, err)
		}
		if launched.DeletionTimestamp.IsZero() && !meta.IsStatusConditionTrue(launched.Status.Conditions, karpv1.ConditionTypeInitialized) {
			awaiting = append(awaiting, name)
		}
	}
	if len(awaiting) == 0 {
		return "", nil
	}
	return "the machines launched for them are up (nodeclaim " + strings.Join(awaiting, ", ") + ")", nil
}

// stuckAfter is how long past its deletion a pod may stay before it no longer holds a drain: a
// pod whose kubelet is gone is never removed.
const stuckAfter = time.Minute

// drainable pods are those a drain must remove: not mirror pods, not finished, not tolerating
// the disrupted taint (they would come straight back, like DaemonSet pods that tolerate every
// taint), and not stuck terminating past their grace period.
func drainable(p *corev1.Pod, now time.Time) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return false
	}
	if p.DeletionTimestamp != nil && now.Sub(p.DeletionTimestamp.Time) > stuckAfter {
		return false
	}
	for i := range p.Spec.Tolerations {
		if p.Spec.Tolerations[i].ToleratesTaint(klog.Background(), &karpv1.DisruptedNoScheduleTaint, false) {
			return false
		}
	}
	return true
}

func critical(p *corev1.Pod) bool {
	return p.Spec.PriorityClassName == "system-cluster-critical" || p.Spec.PriorityClassName == "system-node-critical"
}

func podGrace(p *corev1.Pod) time.Duration {
	if p.Spec.TerminationGracePeriodSeconds != nil {
		return time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

// evict asks the Eviction API to remove the pod, or deletes it outright once the claim's
// termination deadline leaves it no more than its own grace period.
func (c *Controller) evict(ctx context.Context, nc *karpv1.NodeClaim, p *corev1.Pod, end *time.Time) error {
	now := c.Clock.Now()
	if end != nil && !now.Before(end.Add(-podGrace(p))) {
		grace := int64(max(end.Sub(now), 0) / time.Second)
		if p.DeletionTimestamp != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds <= grace {
			return nil
		}
		log.FromContext(ctx).Info("deleting pod: termination grace period reached", "Pod", client.ObjectKeyFromObject(p), "grace-period-seconds", grace)
		c.Recorder.Eventf(p, nil, corev1.EventTypeWarning, "Disrupted", "Drain", "Deleting pod: NodeClaim %s reached its terminationGracePeriod", nc.Name)
		err := c.Client.Delete(ctx, p, client.GracePeriodSeconds(grace))
		return client.IgnoreNotFound(err)
	}
	if p.DeletionTimestamp != nil {
		return nil
	}
	if pods.DoNotDisrupt(p, now) {
		c.warn(p, "FailedDraining", "Drain", fmt.Sprintf("Pod has the %s annotation", karpv1.DoNotDisruptAnnotationKey))
		c.warn(nc, "FailedDraining", "Drain", fmt.Sprintf("Pod %s/%s has the %s annotation", p.Namespace, p.Name, karpv1.DoNotDisruptAnnotationKey))
		return nil
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}}
	err := c.Client.SubResource("eviction").Create(ctx, p, ev)
	switch {
	case err == nil:
		log.FromContext(ctx).Info("evicted pod", "Pod", client.ObjectKeyFromObject(p))
		c.Recorder.Eventf(p, nil, corev1.EventTypeNormal, "Evicted", "Drain", "Evicted pod: NodeClaim %s is terminating", nc.Name)
		return nil
	case apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		pdb := c.blockingPDB(ctx, p)
		if c.pdbEvents.allow(pdb, p, now) {
			name := "a PodDisruptionBudget"
			if pdb != "" {
				name = "PodDisruptionBudget " + pdb
			}
			c.warn(p, "FailedDraining", "Drain", fmt.Sprintf("Eviction blocked by %s: %s", name, err))
		}
		c.warn(nc, "FailedDraining", "Drain", fmt.Sprintf("Pod %s/%s: eviction blocked by a PodDisruptionBudget", p.Namespace, p.Name))
		return nil
	default:
		return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
	}
}

// warn emits a warning whose action is keyed by its message (eventkey), so that a drain blocked by
// one pod and then another shows both.
func (c *Controller) warn(o runtime.Object, reason, action, msg string) {
	c.Recorder.Eventf(o, nil, corev1.EventTypeWarning, reason, eventkey.Action(action, msg), "%s", msg)
}

// blockingPDB names (namespace/name) the PodDisruptionBudget of the pod's namespace whose
// selector matches it, or "" when none is found (the eviction API's answer does not name it).
func (c *Controller) blockingPDB(ctx context.Context, p *corev1.Pod) string {
	pdbs := &policyv1.PodDisruptionBudgetList{}
	if err := c.Client.List(ctx, pdbs, client.InNamespace(p.Namespace)); err != nil {
		return ""
	}
	for i := range pdbs.Items {
		sel, err := metav1.LabelSelectorAsSelector(pdbs.Items[i].Spec.Selector)
		if err != nil || sel.Empty() {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			return p.Namespace + "/" + pdbs.Items[i].Name
		}
	}
	return ""
}

// pdbEventEvery bounds the pod events of one PodDisruptionBudget's blocked evictions: a drain
// retries every few seconds, and a PDB guarding many pods would otherwise write an event per pod
// per retry.
const pdbEventEvery = time.Minute

// pdbEvents remembers when each PodDisruptionBudget (or, unnamed, each pod) last had a blocked
// eviction told on a pod.
type pdbEvents struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// allow reports whether a blocked eviction of the pod may be told on it now: at most once per
// PDB per pdbEventEvery.
func (e *pdbEvents) allow(pdb string, p *corev1.Pod, now time.Time) bool {
	key := pdb
	if key == "" {
		key = "pod " + p.Namespace + "/" + p.Name
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.last == nil {
		e.last = map[string]time.Time{}
	}
	if t, ok := e.last[key]; ok && now.Sub(t) < pdbEventEvery {
		return false
	}
	if len(e.last) > 1000 {
		for k, t := range e.last {
			if now.Sub(t) >= pdbEventEvery {
				delete(e.last, k)
			}
		}
	}
	e.last[key] = now
	return true
}
