package provisioning

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"capstan.dev/capstan/internal/capacitybuffer"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/solver"
)

// LaunchHeldReason is the event reason on a pod for which provisioning buys no more machines:
// MaxMissedMachines bought for it came up without it (planning.MissedAnnotationKey).
const LaunchHeldReason = "LaunchHeld"

// missedClaims are the claims bought for a pod whose nodes came up while it stayed pending, on
// the inputs the plans were made with.
type missedClaims struct {
	inputs string
	claims []string
}

// guard is the runaway guard's first step, before the solve: it records the claims that came up
// without their pods (cameUp, from the nominations) and forgets pods no longer pending. It
// returns the pending pods to plan — without those whose annotation says they are held on the
// current inputs (told again) — and, of those, the claims each has missed so far: those its
// annotation records, and those of this provisioner's memory that are real misses now
// (realMisses).
func (p *Provisioner) guard(ctx context.Context, pending []*corev1.Pod, st *planning.State, cameUp map[types.UID]string,
	said map[types.UID]string) (rest []*corev1.Pod, missed map[types.UID][]string) {
	inputs := st.Inputs
	if p.missed == nil {
		p.missed = map[types.UID]missedClaims{}
	}
	pendingUIDs := make(map[types.UID]bool, len(pending))
	for _, pod := range pending {
		pendingUIDs[pod.UID] = true
	}
	for uid := range p.missed {
		if !pendingUIDs[uid] {
			delete(p.missed, uid)
		}
	}
	for uid, claim := range cameUp {
		m := p.missed[uid]
		if m.inputs != inputs {
			m = missedClaims{inputs: inputs}
		}
		if !slices.Contains(m.claims, claim) {
			m.claims = append(m.claims, claim)
		}
		p.missed[uid] = m
	}
	rest = pending[:0:0]
	for _, pod := range pending {
		if capacitybuffer.IsVirtual(pod) {
			rest = append(rest, pod)
			continue
		}
		recorded := planning.Missed(pod, inputs)
		if len(recorded) >= planning.MaxMissedMachines {
			p.hold(ctx, pod, inputs, recorded, said)
			continue
		}
		claims := slices.Clone(recorded)
		if m, ok := p.missed[pod.UID]; ok && m.inputs == inputs {
			for _, c := range p.realMisses(pod, m.claims, st) {
				if !slices.Contains(claims, c) {
					claims = append(claims, c)
				}
			}
		}
		if len(claims) > 0 {
			if missed == nil {
				missed = map[types.UID][]string{}
			}
			missed[pod.UID] = claims
		}
		rest = append(rest, pod)
	}
	return rest, missed
}

// heldFrom holds the pods the plan would buy another machine for although they missed
// planning.MaxMissedMachines already, and returns the pending pods without them (nil: none
// held, the plan stands).
func (p *Provisioner) heldFrom(ctx context.Context, plan *solver.Result, pending []*corev1.Pod, st *planning.State,
	missed map[types.UID][]string, said map[types.UID]string) []*corev1.Pod {
	if len(missed) == 0 {
		return nil
	}
	held := map[types.UID]bool{}
	for _, nc := range plan.NodeClaims {
		for _, pod := range nc.Pods {
			if claims := missed[pod.UID]; len(claims) >= planning.MaxMissedMachines {
				held[pod.UID] = true
				p.hold(ctx, pod, st.Inputs, claims, said)
			}
		}
	}
	if len(held) == 0 {
		return nil
	}
	rest := make([]*corev1.Pod, 0, len(pending)-len(held))
	for _, pod := range pending {
		if !held[pod.UID] {
			rest = append(rest, pod)
		}
	}
	return rest
}

// hold tells a pod that no more machines are bought for it, and records why on it.
func (p *Provisioner) hold(ctx context.Context, pod *corev1.Pod, inputs string, claims []string, said map[types.UID]string) {
	msg := planning.HeldMessage(claims)
	p.Recorder.Eventf(pod, nil, corev1.EventTypeWarning, LaunchHeldReason, eventkey.Action("Schedule", msg), "%s", msg)
	said[pod.UID] = msg
	if p.unschedulable[pod.UID] != msg {
		log.FromContext(ctx).Info("launching no more machines for pod", "Pod", klog.KObj(pod), "nodeclaims", claims,
			"reason", "its machines came up without it")
	}
	p.recordMissed(ctx, pod, inputs, claims)
}

// recordMissed writes the claims a pod missed into its annotation, unless it says so already. A
// failed write is logged: the provisioner's memory still counts them until it restarts.
func (p *Provisioner) recordMissed(ctx context.Context, pod *corev1.Pod, inputs string, claims []string) {
	value := planning.MissedValue(inputs, claims)
	if pod.Annotations[planning.MissedAnnotationKey] == value {
		return
	}
	patched := pod.DeepCopy()
	if patched.Annotations == nil {
		patched.Annotations = map[string]string{}
	}
	patched.Annotations[planning.MissedAnnotationKey] = value
	if err := p.Client.Patch(ctx, patched, client.MergeFrom(pod)); err != nil && !apierrors.IsNotFound(err) {
		log.FromContext(ctx).Error(err, "recording the machines a pod missed", "Pod", klog.KObj(pod))
	}
}

// seenPendingFor is how long a pod seen pending is remembered as one Capstan planned.
const seenPendingFor = time.Hour

// notePending records the pods of this pass as seen pending, and forgets those not seen for
// seenPendingFor.
func (p *Provisioner) notePending(pending []*corev1.Pod, leaving map[types.UID]bool) {
	now := p.Clock.Now()
	if p.seenPending == nil {
		p.seenPending = map[types.UID]time.Time{}
	}
	for _, pod := range pending {
		if leaving[pod.UID] {
			continue
		}
		p.seenPending[pod.UID] = now
	}
	for uid, at := range p.seenPending {
		if now.Sub(at) > seenPendingFor {
			delete(p.seenPending, uid)
		}
	}
}

// realMisses are the claims, of those whose nodes came up without the pod, whose room went to
// something the plan could not see: their node is gone, or the pod does not fit its allocatable
// less what the pods bound there ask that Capstan never saw pending (DaemonSet and static pods,
// pods bound without the scheduler). A node whose room the kube-scheduler gave to other pending
// pods — in a burst it does not know which pod each machine was bought for — is no miss: the pod
// gets a machine again.
func (p *Provisioner) realMisses(pod *corev1.Pod, claims []string, st *planning.State) []string {
	need := solver.Requests([]*corev1.Pod{pod})
	var out []string
	for _, c := range claims {
		i, ok := st.ClaimNode[c]
		if !ok {
			out = append(out, c)
			continue
		}
		n := &st.Nodes[i]
		var unseen []*corev1.Pod
		for _, b := range n.Pods {
			if _, seen := p.seenPending[b.UID]; !seen {
				unseen = append(unseen, b)
			}
		}
		free := n.Allocatable.DeepCopy()
		for k, q := range solver.Requests(unseen) {
			f := free[k]
			f.Sub(q)
			free[k] = f
		}
		if !cloudprovider.Fits(need, free) {
			out = append(out, c)
		}
	}
	return out
}
