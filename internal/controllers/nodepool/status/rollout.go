package status

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
)

// Rollout counts a pool's nodes by where a rollout has them.
type Rollout struct {
	// UpToDate nodes are built from the current template (their hash is the pool's) and not
	// drifted; Drifted ones are not (a template, NodeClass or provider change) and wait their
	// turn; Replacing ones are drifted and being disrupted (a command holds them, or they are
	// being deleted).
	UpToDate, Drifted, Replacing int
}

// Done reports whether no node is left to replace.
func (r Rollout) Done() bool { return r.Drifted == 0 && r.Replacing == 0 }

// Message says where the rollout is.
func (r Rollout) Message() string {
	total := r.UpToDate + r.Drifted + r.Replacing
	if r.Done() {
		return fmt.Sprintf("all %d node(s) are built from the current template and NodeClass", total)
	}
	return fmt.Sprintf("%d of %d node(s) drifted and waiting, %d being replaced, %d up to date", r.Drifted, total, r.Replacing, r.UpToDate)
}

// rollout counts the claims by rollout state against the pool's current hash. A claim being
// deleted that was up to date (consolidation, expiry) is no longer the pool's and is not counted.
func rollout(hash string, claims []karpv1.NodeClaim) Rollout {
	var r Rollout
	for i := range claims {
		nc := &claims[i]
		stale := meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeDrifted) ||
			nc.Annotations[karpv1.NodePoolHashAnnotationKey] != "" && nc.Annotations[karpv1.NodePoolHashAnnotationKey] != hash
		leaving := !nc.DeletionTimestamp.IsZero() || nc.Annotations[disruptionplan.CommandAnnotationKey] != ""
		switch {
		case !stale && !nc.DeletionTimestamp.IsZero():
		case !stale:
			r.UpToDate++
		case leaving:
			r.Replacing++
		default:
			r.Drifted++
		}
	}
	return r
}
