package planning

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"capstan.dev/capstan/internal/pods"
)

// DaemonSetPods are one pod per DaemonSet, as the solver charges them to every new machine. A
// DaemonSet's pods are not its template: the API server admits each with its namespace's
// LimitRange defaults (and any mutating webhook's changes). So a DaemonSet's overhead is, as
// Karpenter takes it, its newest pod the cluster runs (from bound: the pods bound, by node), with
// the template's scheduling constraints (the DaemonSet controller pins each pod to its node);
// and where none runs yet, its template with the LimitRange defaults of its namespace (lrs) as
// the API server's LimitRanger will apply them, and requests defaulted from limits. A plan that charged the template alone bought a
// machine the DaemonSet's pod then filled, and another for the pod left out, and another.
// DaemonSets whose pods ask for DRA devices are left out, as Karpenter leaves them out.
func DaemonSetPods(dss []appsv1.DaemonSet, bound map[string][]*corev1.Pod, lrs []corev1.LimitRange) []*corev1.Pod {
	newest := newestDaemonSetPods(bound)
	out := make([]*corev1.Pod, 0, len(dss))
	for i := range dss {
		ds := &dss[i]
		if pods.HasDRARequirements(&corev1.Pod{Spec: ds.Spec.Template.Spec}) {
			// Its devices are not modelled; neither is its overhead (as Karpenter does).
			continue
		}
		spec := ds.Spec.Template.Spec
		if p := newest[ds.UID]; p != nil {
			spec.Containers, spec.InitContainers, spec.Overhead = p.Spec.Containers, p.Spec.InitContainers, p.Spec.Overhead
		} else {
			spec.Containers = WithLimitRangeDefaults(spec.Containers, ds.Namespace, lrs)
			spec.InitContainers = WithLimitRangeDefaults(spec.InitContainers, ds.Namespace, lrs)
			spec.Overhead = nil // the RuntimeClass admission sets it; a template carries none
		}
		out = append(out, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ds.Namespace, Name: ds.Name, Labels: ds.Spec.Template.Labels},
			Spec: spec})
	}
	return out
}

// newestDaemonSetPods indexes, by their DaemonSet's UID, the newest bound pod each DaemonSet
// controls.
func newestDaemonSetPods(bound map[string][]*corev1.Pod) map[types.UID]*corev1.Pod {
	out := map[types.UID]*corev1.Pod{}
	for _, pods := range bound {
		for _, p := range pods {
			ref := metav1.GetControllerOfNoCopy(p)
			if ref == nil || ref.Kind != "DaemonSet" {
				continue
			}
			if cur := out[ref.UID]; cur == nil || cur.CreationTimestamp.Before(&p.CreationTimestamp) {
				out[ref.UID] = p
			}
		}
	}
	return out
}

// WithLimitRangeDefaults are containers as the API server's LimitRanger admits them in namespace
// ns: each resource a container leaves unset takes the default limit and default request of the
// namespace's Container LimitRanges (the first LimitRange to set one wins), and a request still
// unset takes the container's limit, as the API server defaults it. The LimitRanges' own defaults
// (a default request from the default limit, or from min; a default limit from max) are applied
// first, as the API server applies them to stored LimitRanges, so a LimitRange from a recording
// reads the same. Without a LimitRange only the last rule applies: a template that sets a memory
// limit alone makes pods that request it. The containers given are not changed.
func WithLimitRangeDefaults(containers []corev1.Container, ns string, lrs []corev1.LimitRange) []corev1.Container {
	var limits, requests []corev1.ResourceList
	for i := range lrs {
		if lrs[i].Namespace != ns {
			continue
		}
		for _, item := range lrs[i].Spec.Limits {
			if item.Type != corev1.LimitTypeContainer {
				continue
			}
			l, r := itemDefaults(item)
			limits, requests = append(limits, l), append(requests, r)
		}
	}
	if len(containers) == 0 {
		return containers
	}
	out := make([]corev1.Container, len(containers))
	for i := range containers {
		c := containers[i]
		c.Resources.Limits = withUnset(c.Resources.Limits, limits)
		c.Resources.Requests = withUnset(c.Resources.Requests, requests)
		c.Resources.Requests = withUnset(c.Resources.Requests, []corev1.ResourceList{c.Resources.Limits})
		out[i] = c
	}
	return out
}

// itemDefaults are a Container LimitRange item's default limit and default request, completed as
// the API server completes them: the default limit from max, the default request from the default
// limit, then from min.
func itemDefaults(item corev1.LimitRangeItem) (limits, requests corev1.ResourceList) {
	limits = withUnset(item.Default, []corev1.ResourceList{item.Max})
	requests = withUnset(item.DefaultRequest, []corev1.ResourceList{limits, item.Min})
	return limits, requests
}

// withUnset is rl with each resource it lacks taken from the first of from that has it; rl itself
// is copied when something is added, never changed.
func withUnset(rl corev1.ResourceList, from []corev1.ResourceList) corev1.ResourceList {
	out, copied := rl, false
	for _, f := range from {
		for name, q := range f {
			if _, ok := out[name]; ok {
				continue
			}
			if !copied {
				out, copied = make(corev1.ResourceList, len(rl)+len(f)), true
				for k, v := range rl {
					out[k] = v
				}
			}
			out[name] = q.DeepCopy()
		}
	}
	return out
}
