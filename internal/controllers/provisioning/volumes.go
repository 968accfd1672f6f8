package provisioning

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"capstan.dev/capstan/internal/volumetopology"
)

// withVolumes returns the pending pods with what their persistent volumes demand added to their
// required node affinity (a zonal volume's zone, a WaitForFirstConsumer class's allowed
// topologies). Pods whose volumes are not ready to schedule — a missing claim, a claim waiting for
// immediate binding — are left out of this pass, with an event saying why.
func (p *Provisioner) withVolumes(ctx context.Context, pending []*corev1.Pod) ([]*corev1.Pod, error) {
	if !anyClaims(pending) {
		return pending, nil
	}
	objs, err := p.volumeObjects(ctx)
	if err != nil {
		return nil, err
	}
	out := pending[:0]
	for _, pod := range pending {
		needs, err := objs.For(pod)
		if err != nil {
			p.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", "Schedule", "Waiting for volumes: %s", err.Error())
			log.FromContext(ctx).V(1).Info("ignoring pod until its volumes are ready", "Pod", klog.KObj(pod), "reason", err.Error())
			continue
		}
		out = append(out, volumetopology.Inject(pod, needs))
	}
	return out, nil
}

func anyClaims(pods []*corev1.Pod) bool {
	for _, pod := range pods {
		for _, v := range pod.Spec.Volumes {
			if v.PersistentVolumeClaim != nil || v.Ephemeral != nil {
				return true
			}
		}
	}
	return false
}

func (p *Provisioner) volumeObjects(ctx context.Context) (volumetopology.Objects, error) {
	objs := volumetopology.Objects{
		PVCs:           map[types.NamespacedName]*corev1.PersistentVolumeClaim{},
		PVs:            map[string]*corev1.PersistentVolume{},
		StorageClasses: map[string]*storagev1.StorageClass{},
	}
	pvcs := &corev1.PersistentVolumeClaimList{}
	if err := p.Client.List(ctx, pvcs); err != nil {
		return objs, fmt.Errorf("listing persistentvolumeclaims: %w", err)
	}
	for i := range pvcs.Items {
		c := &pvcs.Items[i]
		objs.PVCs[types.NamespacedName{Namespace: c.Namespace, Name: c.Name}] = c
	}
	pvs := &corev1.PersistentVolumeList{}
	if err := p.Client.List(ctx, pvs); err != nil {
		return objs, fmt.Errorf("listing persistentvolumes: %w", err)
	}
	for i := range pvs.Items {
		objs.PVs[pvs.Items[i].Name] = &pvs.Items[i]
	}
	scs := &storagev1.StorageClassList{}
	if err := p.Client.List(ctx, scs); err != nil {
		return objs, fmt.Errorf("listing storageclasses: %w", err)
	}
	for i := range scs.Items {
		objs.StorageClasses[scs.Items[i].Name] = &scs.Items[i]
	}
	return objs, nil
}
