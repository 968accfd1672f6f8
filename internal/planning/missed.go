package planning

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// MissedAnnotationKey, on a pending pod, lists the NodeClaims Capstan bought for the pod whose
// nodes came up without the pod binding there, after the fingerprint of the inputs the plans were
// made with: "<inputs>:<claim>,<claim>". A plan that put the pod on a machine which then did not
// take it was wrong about something it cannot see (a DaemonSet pod a webhook enlarged, a node
// smaller than its type promised, pods bound without the scheduler); buying again and again on
// the same inputs would buy a machine a round, for good. So a pod gets MaxMissedMachines machines
// on the same inputs and then waits: until a NodePool, DaemonSet or LimitRange changes (the
// fingerprint differs and the list no longer counts) or the pod is recreated. The annotation
// keeps the count across restarts and leader changes, and tells `kubectl capstan explain pod`.
const MissedAnnotationKey = "capstan.dev/missed-nodeclaims"

// MaxMissedMachines is how many machines bought for a pod may come up without it before
// provisioning buys no more for it on the same inputs: the first, and one more attempt.
const MaxMissedMachines = 2

// Inputs fingerprints what a plan's picture of a new machine is made of beyond the pods: the
// NodePools' specs, the DaemonSets' specs and the LimitRanges. A change to any of them may be the
// user's fix of what made machines come up without their pods.
func Inputs(nps []karpv1.NodePool, dss []appsv1.DaemonSet, lrs []corev1.LimitRange) string {
	parts := make([]string, 0, len(nps)+len(dss)+len(lrs))
	for i := range nps {
		parts = append(parts, fmt.Sprintf("np/%s/%d", nps[i].UID, nps[i].Generation))
	}
	for i := range dss {
		parts = append(parts, fmt.Sprintf("ds/%s/%d", dss[i].UID, dss[i].Generation))
	}
	for i := range lrs {
		parts = append(parts, fmt.Sprintf("lr/%s/%s", lrs[i].UID, lrs[i].ResourceVersion))
	}
	slices.Sort(parts)
	sum := sha256.Sum256([]byte(strings.Join(parts, "\n")))
	return hex.EncodeToString(sum[:])[:12]
}

// Missed are the claims the pod's annotation lists as come up without it, on the inputs given;
// none when the annotation was written on other inputs.
func Missed(pod *corev1.Pod, inputs string) []string {
	v := pod.Annotations[MissedAnnotationKey]
	fp, claims, ok := strings.Cut(v, ":")
	if !ok || fp != inputs || claims == "" {
		return nil
	}
	return strings.Split(claims, ",")
}

// MissedValue is the annotation's value for the claims on the inputs.
func MissedValue(inputs string, claims []string) string {
	return inputs + ":" + strings.Join(claims, ",")
}

// HeldMessage says why provisioning buys no more machines for a pod that missed the claims.
func HeldMessage(claims []string) string {
	named := make([]string, len(claims))
	for i, c := range claims {
		named[i] = "nodeclaim/" + c
	}
	return fmt.Sprintf("Pod did not schedule on the %d machines bought for it (%s): their nodes came up and it was not bound there; "+
		"something the plan cannot see takes the room planned for it (a DaemonSet pod changed by a webhook, a node smaller than its instance type promised, "+
		"pods bound without the scheduler); no more machines are launched for it until a NodePool, DaemonSet or LimitRange changes or the pod is recreated",
		len(claims), strings.Join(named, ", "))
}
