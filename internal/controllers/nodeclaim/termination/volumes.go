package termination

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// awaitVolumes waits, after the drain, until the node's VolumeAttachments are gone, so that a
// volume is detached before its machine is terminated (a forced detach risks the data). The
// attachments of pods that stay to the end (they tolerate the disrupted taint) are not waited
// for. The claim's terminationGracePeriod, when set, bounds the wait.
func (c *Controller) awaitVolumes(ctx context.Context, nc *karpv1.NodeClaim, node *corev1.Node) (reconcile.Result, bool, error) {
	left, err := c.attachedVolumes(ctx, node)
	if err != nil {
		return reconcile.Result{}, false, err
	}
	if left == 0 {
		c.setCondition(nc, karpv1.ConditionTypeVolumesDetached, metav1.ConditionTrue, "VolumesDetached", "")
		return reconcile.Result{}, true, nil
	}
	if end := deadline(nc); end != nil && !c.Clock.Now().Before(*end) {
		log.FromContext(ctx).Info("terminating with volumes attached: termination grace period elapsed", "Node", node.Name, "attachments", left)
		c.setCondition(nc, karpv1.ConditionTypeVolumesDetached, metav1.ConditionFalse, "TerminationGracePeriodElapsed",
			fmt.Sprintf("%d volume attachment(s) left when the termination grace period elapsed", left))
		return reconcile.Result{}, true, nil
	}
	c.setCondition(nc, karpv1.ConditionTypeVolumesDetached, metav1.ConditionFalse, "AwaitingVolumeDetachment",
		fmt.Sprintf("%d volume attachment(s) left", left))
	return reconcile.Result{RequeueAfter: pollInterval}, false, nil
}

// attachedVolumes counts the node's VolumeAttachments other than those of pods that stay.
func (c *Controller) attachedVolumes(ctx context.Context, node *corev1.Node) (int, error) {
	vas := &storagev1.VolumeAttachmentList{}
	if err := c.Client.List(ctx, vas); err != nil {
		return 0, fmt.Errorf("listing volumeattachments: %w", err)
	}
	var mine []*storagev1.VolumeAttachment
	for i := range vas.Items {
		if vas.Items[i].Spec.NodeName == node.Name {
			mine = append(mine, &vas.Items[i])
		}
	}
	if len(mine) == 0 {
		return 0, nil
	}
	staying, err := c.stayingVolumes(ctx, node)
	if err != nil {
		return 0, err
	}
	left := 0
	for _, va := range mine {
		if pv := va.Spec.Source.PersistentVolumeName; pv != nil && staying[*pv] {
			continue
		}
		left++
	}
	return left, nil
}

// stayingVolumes are the persistent volumes of the node's pods that are not drained.
func (c *Controller) stayingVolumes(ctx context.Context, node *corev1.Node) (map[string]bool, error) {
	pods := &corev1.PodList{}
	if err := c.Client.List(ctx, pods, client.MatchingFields{"spec.nodeName": node.Name}); err != nil {
		return nil, fmt.Errorf("listing pods of node %s: %w", node.Name, err)
	}
	out := map[string]bool{}
	now := c.Clock.Now()
	for i := range pods.Items {
		p := &pods.Items[i]
		if drainable(p, now) {
			continue
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			pvc := &corev1.PersistentVolumeClaim{}
			err := c.Client.Get(ctx, client.ObjectKey{Namespace: p.Namespace, Name: v.PersistentVolumeClaim.ClaimName}, pvc)
			if err != nil {
				if client.IgnoreNotFound(err) == nil {
					continue
				}
				return nil, fmt.Errorf("getting persistentvolumeclaim %s/%s: %w", p.Namespace, v.PersistentVolumeClaim.ClaimName, err)
			}
			if pvc.Spec.VolumeName != "" {
				out[pvc.Spec.VolumeName] = true
			}
		}
	}
	return out, nil
}
