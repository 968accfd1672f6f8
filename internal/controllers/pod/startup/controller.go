// Package startup records karpenter_pods_startup_duration_seconds: for each pod that becomes
// ready, the time from its creation until then.
package startup

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"capstan.dev/capstan/internal/metrics"
)

// Controller observes pods becoming ready.
type Controller struct {
	Client  client.Client
	Clock   clock.Clock
	Metrics *metrics.Metrics

	once  sync.Once
	start time.Time
	mu    sync.Mutex
	// seen holds, per pod name, the UID of the pod recorded under it.
	seen map[types.NamespacedName]types.UID
}

// Name is the controller's name and log key.
func (c *Controller) Name() string { return "pod.startup" }

// Register adds the controller to a manager.
func (c *Controller) Register(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).Named(c.Name()).For(&corev1.Pod{}).Complete(c)
}

func (c *Controller) init() {
	c.once.Do(func() {
		c.start = c.Clock.Now()
		c.seen = map[types.NamespacedName]types.UID{}
	})
}

// Reconcile records a pod's startup once, when it is ready. Pods that became ready before the
// controller started are not recorded: their startup was observed by whoever ran then.
func (c *Controller) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	c.init()
	pod := &corev1.Pod{}
	if err := c.Client.Get(ctx, req.NamespacedName, pod); err != nil {
		if client.IgnoreNotFound(err) == nil {
			c.mu.Lock()
			delete(c.seen, req.NamespacedName)
			c.mu.Unlock()
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ready := readySince(pod)
	if ready.IsZero() || ready.Before(c.start) {
		return reconcile.Result{}, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen[req.NamespacedName] == pod.UID {
		return reconcile.Result{}, nil
	}
	c.seen[req.NamespacedName] = pod.UID
	c.Metrics.PodStarted(ready.Sub(pod.CreationTimestamp.Time).Seconds())
	return reconcile.Result{}, nil
}

// readySince is when the running pod became ready, or zero.
func readySince(p *corev1.Pod) time.Time {
	if p.Status.Phase != corev1.PodRunning {
		return time.Time{}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			return cond.LastTransitionTime.Time
		}
	}
	return time.Time{}
}
