package solver

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// registerAttachments adds a dimension per CSI driver any pod attaches, in name order, before any
// vector is sized.
func (s *solver) registerAttachments() {
	var names []string
	for _, att := range s.in.Attachments {
		for driver := range att {
			names = append(names, attachPrefix+driver)
		}
	}
	slices.Sort(names)
	for _, n := range slices.Compact(names) {
		s.noteAttachDim(corev1.ResourceName(n))
	}
}

// attachPrefix names the resource dimension of a CSI driver's volume attachments, in the style
// of the kubelet's own attachable-volumes resources.
const attachPrefix = "attachable-volumes-csi-"

// unlimitedAttachments is the room of a driver without a published limit (in milli-units).
const unlimitedAttachments = int64(1) << 50

// withAttachments adds the pod's CSI volume attachments to its requests, one dimension per driver.
func (s *solver) withAttachments(p *corev1.Pod, rl corev1.ResourceList) corev1.ResourceList {
	att := s.in.Attachments[p.UID]
	if len(att) == 0 {
		return rl
	}
	out := maps.Clone(rl)
	if out == nil {
		out = corev1.ResourceList{}
	}
	for driver, n := range att {
		name := corev1.ResourceName(attachPrefix + driver)
		q := out[name]
		q.Add(*resource.NewQuantity(n, resource.DecimalSI))
		out[name] = q
	}
	return out
}

func (s *solver) noteAttachDim(name corev1.ResourceName) {
	d := s.ri.add(name)
	for _, x := range s.attachDims {
		if x == d {
			return
		}
	}
	s.attachDims = append(s.attachDims, d)
}

// attachLimits sets a target's room for each driver's attachments: an existing node's published
// limit, or a new machine's type's (InstanceType.VolumeLimits), or no limit.
func (s *solver) attachLimits(alloc vec, limits map[string]int64) {
	for _, d := range s.attachDims {
		driver := strings.TrimPrefix(string(s.ri.names[d]), attachPrefix)
		if n, ok := limits[driver]; ok {
			alloc[d] = n * 1000
		} else {
			alloc[d] = unlimitedAttachments
		}
	}
}
