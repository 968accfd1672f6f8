package provisioning

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/volumetopology"
)

// withVolumes returns the pending pods with what their persistent volumes demand added to their
// required node affinity (a zonal volume's zone, a WaitForFirstConsumer class's allowed
// topologies). Pods whose volumes are not ready to schedule — a missing claim, a claim waiting for
// immediate binding — are left out of this pass, with an event saying why.
func (p *Provisioner) withVolumes(ctx context.Context, pending []*corev1.Pod) ([]*corev1.Pod, *volumes, error) {
	if !anyClaims(pending) {
		return pending, nil, nil
	}
	objs, err := p.volumeObjects(ctx)
	if err != nil {
		return nil, nil, err
	}
	vols := &volumes{objs: objs, attachments: map[types.UID]map[string]int64{}}
	out := pending[:0]
	for _, pod := range pending {
		needs, err := objs.For(pod)
		if err != nil {
			msg := "Waiting for volumes: " + err.Error()
			if !capacitybuffer.IsVirtual(pod) {
				p.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, "FailedScheduling", eventkey.Action("Schedule", msg), "%s", msg)
			}
			log.FromContext(ctx).V(1).Info("ignoring pod until its volumes are ready", "Pod", klog.KObj(pod), "reason", err.Error())
			continue
		}
		if len(needs.Attachments) > 0 {
			vols.attachments[pod.UID] = needs.Attachments
		}
		out = append(out, volumetopology.Inject(pod, needs))
	}
	return out, vols, nil
}

// volumes are the pass's volume objects and the CSI attachments of the pods that have some.
type volumes struct {
	objs        volumetopology.Objects
	attachments map[types.UID]map[string]int64
}

// limitAttachments gives the existing nodes their CSINode attach limits and counts the volumes
// their pods already attach, when some pending pod attaches volumes.
func (p *Provisioner) limitAttachments(ctx context.Context, vols *volumes, nodes []solver.ExistingNode) error {
	if vols == nil || len(vols.attachments) == 0 {
		return nil
	}
	csiNodes := &storagev1.CSINodeList{}
	if err := p.Client.List(ctx, csiNodes); err != nil {
		return fmt.Errorf("listing csinodes: %w", err)
	}
	limits := map[string]map[string]int64{}
	for _, cn := range csiNodes.Items {
		for _, d := range cn.Spec.Drivers {
			if d.Allocatable != nil && d.Allocatable.Count != nil {
				if limits[cn.Name] == nil {
					limits[cn.Name] = map[string]int64{}
				}
				limits[cn.Name][d.Name] = int64(*d.Allocatable.Count)
			}
		}
	}
	for i := range nodes {
		n := &nodes[i]
		if limits[n.Name] == nil {
			continue
		}
		n.VolumeLimits = limits[n.Name]
		for _, pod := range n.Pods {
			// A bound pod's volumes are bound too; one that cannot be read counts nothing.
			if needs, err := vols.objs.For(pod); err == nil && len(needs.Attachments) > 0 {
				vols.attachments[pod.UID] = needs.Attachments
			}
		}
	}
	return nil
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

// Prepare makes pods that are not in the cluster — those a ProvisioningRequest stands for — ready
// for the solver as a pass makes its pending pods: the cluster's default topology spread
// constraints, and what their persistent volume claims demand of a node (a zonal volume's zone, a
// WaitForFirstConsumer class's allowed topologies). Generic ephemeral volumes are left out: their
// claims are made with the pods. A pod whose claims are not ready to schedule (missing, waiting
// for immediate binding) is an error wrapping volumetopology.NotReadyError.
func (p *Provisioner) Prepare(ctx context.Context, pods []*corev1.Pod) ([]*corev1.Pod, error) {
	pods = p.DefaultSpread.Apply(ctx, pods)
	var objs *volumetopology.Objects
	out := make([]*corev1.Pod, 0, len(pods))
	for _, pod := range pods {
		if !slices.ContainsFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.PersistentVolumeClaim != nil }) {
			out = append(out, pod)
			continue
		}
		// The pod with its claims' volumes only: a shallow copy with its own volume list.
		claimsOnly := *pod
		claimsOnly.Spec.Volumes = slices.DeleteFunc(slices.Clone(pod.Spec.Volumes), func(v corev1.Volume) bool { return v.Ephemeral != nil })
		if objs == nil {
			o, err := p.volumeObjects(ctx)
			if err != nil {
				return nil, err
			}
			objs = &o
		}
		needs, err := objs.For(&claimsOnly)
		if err != nil {
			return nil, fmt.Errorf("pod %s: %w", pod.Name, err)
		}
		out = append(out, volumetopology.Inject(pod, needs))
	}
	return out, nil
}
