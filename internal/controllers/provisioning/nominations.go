package provisioning

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/solver"
)

// nominations remember, between passes, which in-flight NodeClaim each pending pod was planned
// onto. While the claim has no Node, the pod is not planned again: it is counted on the claim,
// as if bound there, and the pass plans only the pods nobody is waiting a machine for. A burst's
// later passes then cost what their new pods cost, not what all pending pods cost (at 5,000 pods,
// twenty passes re-planned thousands of pods onto the same in-flight claims).
//
// A nomination ends when its pod is no longer pending, when its claim is gone or being deleted,
// and when the claim's Node registers: from then on the node's real bindings count, since the
// kube-scheduler knows nothing of nominations and may bind the pod elsewhere.
type nominations map[types.UID]nomination

// nomination is the claim a pod was planned onto, and the pod's key.
type nomination struct {
	claim string
	pod   types.NamespacedName
}

// nominate records the claims a pass planned pods onto: new claims, and in-flight claims the
// solver bound pods to (named "nodeclaim/<name>" in its input).
func (n nominations) nominate(plan *solver.Result, created []*karpv1.NodeClaim) {
	for i, nc := range created {
		if nc == nil {
			continue
		}
		for _, pod := range plan.NodeClaims[i].Pods {
			n[pod.UID] = nomination{claim: nc.Name, pod: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}
		}
	}
	for _, b := range plan.Bindings {
		if claim, ok := strings.CutPrefix(b.Node, nodeclaims.InFlightPrefix); ok {
			n[b.Pod.UID] = nomination{claim: claim, pod: types.NamespacedName{Namespace: b.Pod.Namespace, Name: b.Pod.Name}}
		}
	}
}

// to are the pods nominated to the claim.
func (n nominations) to(claim string) []types.NamespacedName {
	var out []types.NamespacedName
	for _, nom := range n {
		if nom.claim == claim {
			out = append(out, nom.pod)
		}
	}
	return out
}

// split returns the pending pods still to plan and, per in-flight claim, the pods nominated to
// it; nominations of pods no longer pending or to claims no longer in flight are forgotten. Of
// these, cameUp are the still pending pods whose claim's Node registered (registered), with that
// claim: the machine bought for them came up, and they are not bound to it yet — or never will be.
func (n nominations) split(pending []*corev1.Pod, inFlight map[string]int, registered map[string]bool) (toPlan []*corev1.Pod,
	byClaim map[string][]*corev1.Pod, cameUp map[types.UID]string) {
	stillPending := make(map[types.UID]bool, len(pending))
	toPlan = pending[:0:0]
	byClaim = map[string][]*corev1.Pod{}
	for _, pod := range pending {
		stillPending[pod.UID] = true
		if nom, ok := n[pod.UID]; ok && flying(inFlight, nom.claim) {
			byClaim[nom.claim] = append(byClaim[nom.claim], pod)
			continue
		}
		toPlan = append(toPlan, pod)
	}
	for uid, nom := range n {
		if !stillPending[uid] || !flying(inFlight, nom.claim) {
			if stillPending[uid] && registered[nom.claim] {
				if cameUp == nil {
					cameUp = map[types.UID]string{}
				}
				cameUp[uid] = nom.claim
			}
			delete(n, uid)
		}
	}
	return toPlan, byClaim, cameUp
}

func flying(inFlight map[string]int, claim string) bool {
	_, ok := inFlight[claim]
	return ok
}
