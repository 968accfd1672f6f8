package lifecycle

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/registration"
)

// Reasons of a NodePool's NodeRegistrationHealthy condition written here.
const (
	ReasonNodeRegistrationHealthy = "NodeRegistrationHealthy"
	ReasonRegistrationFailed      = "RegistrationFailed"
)

// recordOutcome adds one launch's outcome to its NodePool's registration record and writes the
// pool's NodeRegistrationHealthy condition when the record changes it: reason and msg say why
// the launch failed. A claim its pool does not own (written by hand, or the pool deleted and
// created again since) records nothing. A failure to write is logged, not returned: the claim's
// own progress does not wait on its pool's status, and the next outcome writes the condition.
func (c *Controller) recordOutcome(ctx context.Context, nc *karpv1.NodeClaim, registered bool, reason, msg string) {
	name := nc.Labels[karpv1.NodePoolLabelKey]
	if c.Health == nil || name == "" {
		return
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		np := &karpv1.NodePool{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, np); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !slices.ContainsFunc(nc.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "NodePool" && o.UID == np.UID }) {
			return nil
		}
		want := c.Health.Record(np, nc.UID, registered)
		cur := meta.FindStatusCondition(np.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy)
		if want == metav1.ConditionUnknown || (cur != nil && cur.Status == want) {
			return nil
		}
		stored := np.DeepCopy()
		cond := metav1.Condition{Type: karpv1.ConditionTypeNodeRegistrationHealthy, Status: want, Reason: ReasonNodeRegistrationHealthy,
			ObservedGeneration: np.Generation, LastTransitionTime: metav1.NewTime(c.Clock.Now())}
		if cur != nil {
			// The generation the status controller last reset the record at: a spec change it
			// has not seen yet still resets it.
			cond.ObservedGeneration = cur.ObservedGeneration
		}
		if want == metav1.ConditionFalse {
			cond.Reason, cond.Message = reason, fmt.Sprintf("%d or more of the last %d launches failed; the latest: %s",
				registration.FailuresToUnhealthy, registration.Window, msg)
		}
		meta.SetStatusCondition(&np.Status.Conditions, cond)
		if err := c.Client.Status().Patch(ctx, np, client.MergeFromWithOptions(stored, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		log.FromContext(ctx).Info("nodepool registration health changed", "NodePool", name, "status", want, "reason", cond.Reason)
		return nil
	})
	if err := client.IgnoreNotFound(err); err != nil {
		log.FromContext(ctx).Error(err, "writing the nodepool's registration health", "NodePool", name)
	}
}
