// Package volumetopology reads what a pod's persistent volumes demand of the node it runs on: the
// zones (or other labels) a bound PersistentVolume's node affinity allows, the topologies a
// WaitForFirstConsumer StorageClass may provision in, and how many volumes of each CSI driver the
// node must attach. It is pure: the caller looks the objects up.
package volumetopology

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Objects are the volume objects a pod's claims refer to.
type Objects struct {
	PVCs           map[types.NamespacedName]*corev1.PersistentVolumeClaim
	PVs            map[string]*corev1.PersistentVolume
	StorageClasses map[string]*storagev1.StorageClass
}

// Needs is what a pod's volumes demand of a node.
type Needs struct {
	// Terms are alternatives (ORed) per volume; a node must satisfy one term of every entry.
	Terms [][]corev1.NodeSelectorTerm
	// Attachments counts the pod's volumes per CSI driver.
	Attachments map[string]int64
}

// NotReadyError means the pod cannot be placed yet because of its volumes: a claim that does not
// exist, is bound to a missing volume, or waits for immediate binding.
type NotReadyError struct{ Reason string }

func (e *NotReadyError) Error() string { return e.Reason }

// IsNotReady reports whether err is or wraps a NotReadyError.
func IsNotReady(err error) bool {
	var nr *NotReadyError
	return errors.As(err, &nr)
}

// For returns what the pod's persistent volumes need, or a *NotReadyError.
func (o Objects) For(pod *corev1.Pod) (Needs, error) {
	var n Needs
	for _, v := range pod.Spec.Volumes {
		name := ""
		switch {
		case v.PersistentVolumeClaim != nil:
			name = v.PersistentVolumeClaim.ClaimName
		case v.Ephemeral != nil:
			// A generic ephemeral volume's claim is named after the pod and the volume.
			name = pod.Name + "-" + v.Name
		default:
			continue
		}
		pvc, ok := o.PVCs[types.NamespacedName{Namespace: pod.Namespace, Name: name}]
		if !ok {
			return Needs{}, &NotReadyError{Reason: fmt.Sprintf("persistentvolumeclaim %q not found", name)}
		}
		terms, driver, err := o.claimNeeds(pvc)
		if err != nil {
			return Needs{}, err
		}
		if len(terms) > 0 {
			n.Terms = append(n.Terms, terms)
		}
		if driver != "" {
			if n.Attachments == nil {
				n.Attachments = map[string]int64{}
			}
			n.Attachments[driver]++
		}
	}
	return n, nil
}

// claimNeeds is what one claim needs: its volume's node affinity when bound, its StorageClass's
// allowed topologies when it waits for its first consumer; and its CSI driver, if any.
func (o Objects) claimNeeds(pvc *corev1.PersistentVolumeClaim) ([]corev1.NodeSelectorTerm, string, error) {
	if pv := pvc.Spec.VolumeName; pv != "" {
		vol, ok := o.PVs[pv]
		if !ok {
			return nil, "", &NotReadyError{Reason: fmt.Sprintf("persistentvolumeclaim %q is bound to persistentvolume %q, which does not exist", pvc.Name, pv)}
		}
		driver := ""
		if vol.Spec.CSI != nil {
			driver = vol.Spec.CSI.Driver
		}
		if vol.Spec.NodeAffinity == nil || vol.Spec.NodeAffinity.Required == nil {
			return nil, driver, nil
		}
		return vol.Spec.NodeAffinity.Required.NodeSelectorTerms, driver, nil
	}
	scName := ""
	if pvc.Spec.StorageClassName != nil {
		scName = *pvc.Spec.StorageClassName
	}
	sc, ok := o.StorageClasses[scName]
	if !ok {
		// Without a class the claim can only bind to an existing volume, which it has not yet.
		return nil, "", &NotReadyError{Reason: fmt.Sprintf("persistentvolumeclaim %q is unbound and storageclass %q not found", pvc.Name, scName)}
	}
	if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		return nil, "", &NotReadyError{Reason: fmt.Sprintf("persistentvolumeclaim %q waits for immediate binding", pvc.Name)}
	}
	var terms []corev1.NodeSelectorTerm
	for _, t := range sc.AllowedTopologies {
		var exprs []corev1.NodeSelectorRequirement
		for _, e := range t.MatchLabelExpressions {
			exprs = append(exprs, corev1.NodeSelectorRequirement{Key: e.Key, Operator: corev1.NodeSelectorOpIn, Values: e.Values})
		}
		if len(exprs) > 0 {
			terms = append(terms, corev1.NodeSelectorTerm{MatchExpressions: exprs})
		}
	}
	return terms, sc.Provisioner, nil
}

// Inject returns a copy of the pod whose required node affinity also demands the volumes' terms:
// each of the pod's own terms (or its node selector alone) ANDed with one term of every volume.
// The pod is returned unchanged when its volumes demand nothing.
func Inject(pod *corev1.Pod, n Needs) *corev1.Pod {
	if len(n.Terms) == 0 {
		return pod
	}
	out := pod.DeepCopy()
	var base []corev1.NodeSelectorTerm
	if a := out.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		base = a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	}
	if len(base) > 0 {
		// An empty term matches no node; ANDing a volume's term must not make it match.
		var kept []corev1.NodeSelectorTerm
		for _, b := range base {
			if len(b.MatchExpressions) > 0 || len(b.MatchFields) > 0 {
				kept = append(kept, b)
			}
		}
		if len(kept) == 0 {
			return pod
		}
		base = kept
	} else {
		base = []corev1.NodeSelectorTerm{{}}
	}
	for _, alternatives := range n.Terms {
		var next []corev1.NodeSelectorTerm
		for _, b := range base {
			for _, v := range alternatives {
				next = append(next, corev1.NodeSelectorTerm{
					MatchExpressions: append(append([]corev1.NodeSelectorRequirement{}, b.MatchExpressions...), v.MatchExpressions...),
					MatchFields:      append(append([]corev1.NodeSelectorRequirement{}, b.MatchFields...), v.MatchFields...),
				})
			}
		}
		base = next
	}
	if out.Spec.Affinity == nil {
		out.Spec.Affinity = &corev1.Affinity{}
	}
	if out.Spec.Affinity.NodeAffinity == nil {
		out.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	out.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: base}
	return out
}
