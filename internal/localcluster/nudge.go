package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// DefaultNudgeAfter is how long a pod bound to a kwok node may stay Pending past its ready delay
// before the local cluster nudges it (Options.NudgeAfter).
const DefaultNudgeAfter = 30 * time.Second

// NudgedAnnotation is the annotation the local cluster sets (to the time, RFC 3339) on a pod
// bound to a kwok node that kwok left Pending, so that kwok sees the pod change and plays its
// pod-ready stage again. kwok v0.8.0 does not retry a stage whose status update the API server
// refused for a reason other than the network (two pods made ready at once can each be given two
// pod IPs, which the API server refuses), so without it such a pod stays Pending for good — a
// kubelet would have tried again.
const NudgedAnnotation = "capstan.dev/kwok-nudged"

// maxNudges bounds the pods one pass nudges: kwok falling behind in a burst of thousands of pods
// must not be answered with thousands of writes (the race it is for leaves a few pods).
const maxNudges = 100

// nudger finds pods that kwok left Pending on its nodes and nudges them.
type nudger struct {
	client kubernetes.Interface
	clock  clock.PassiveClock
	after  time.Duration
	log    logr.Logger
}

// run nudges every interval until ctx ends.
func (n *nudger) run(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if _, err := n.pass(ctx); err != nil && ctx.Err() == nil {
			n.log.Info("nudging pods kwok left pending", "error", err.Error())
		}
	}, interval)
}

// pass nudges the pods bound to a kwok node that have been Pending for n.after past their ready
// delay and their last nudge, at most maxNudges; it returns the pods nudged.
func (n *nudger) pass(ctx context.Context) ([]string, error) {
	pods, err := n.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "status.phase=Pending,spec.nodeName!="})
	if err != nil {
		return nil, fmt.Errorf("listing pending pods: %w", err)
	}
	now := n.clock.Now()
	var due []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; p.DeletionTimestamp == nil && now.Sub(n.due(p)) >= n.after {
			due = append(due, p)
		}
	}
	if len(due) == 0 {
		// The usual answer: nodes are read only when some pod is overdue.
		return nil, nil
	}
	nodes, err := n.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	kwok := map[string]bool{}
	for _, node := range nodes.Items {
		if node.Annotations[KwokNodeAnnotation] == "fake" {
			kwok[node.Name] = true
		}
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{NudgedAnnotation: now.UTC().Format(time.RFC3339)}}})
	if err != nil {
		return nil, err
	}
	var nudged []string
	for _, p := range due {
		if !kwok[p.Spec.NodeName] {
			continue
		}
		if len(nudged) == maxNudges {
			break
		}
		if _, err := n.client.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			n.log.Info("nudging a pod kwok left pending", "pod", p.Namespace+"/"+p.Name, "error", err.Error())
			continue
		}
		n.log.Info("nudged a pod kwok left pending", "pod", p.Namespace+"/"+p.Name, "node", p.Spec.NodeName)
		nudged = append(nudged, p.Namespace+"/"+p.Name)
	}
	return nudged, nil
}

// due is when kwok should have made the pod ready: its binding (the PodScheduled condition, else
// its creation) plus its ready delay, or its last nudge if later.
func (n *nudger) due(p *corev1.Pod) time.Time {
	due := p.CreationTimestamp.Time
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.After(due) {
			due = c.LastTransitionTime.Time
		}
	}
	if d, err := time.ParseDuration(p.Annotations[ReadyDelayAnnotation]); err == nil && d > 0 {
		due = due.Add(d)
	}
	if t, err := time.Parse(time.RFC3339, p.Annotations[NudgedAnnotation]); err == nil && t.After(due) {
		due = t
	}
	return due
}
