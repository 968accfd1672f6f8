package chaos

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/crashpoint"
)

// disruptionPoints are the crash points of a disruption, in the order a command reaches them.
var disruptionPoints = []string{crashpoint.DisruptionRecorded, crashpoint.DisruptionTainted,
	crashpoint.ReplacementsCreated, crashpoint.CandidateDeleted, crashpoint.InstanceDeleted}

// TestCrashDuringDisruption: every node of a pool drifts (its template changes) and is replaced,
// then half the pods go and consolidation deletes the emptied nodes, while Capstan is killed again
// and again — at seeded random moments, and at each step of a disruption: the command recorded on
// its candidates, their nodes tainted, the replacements created, a candidate deleted, a machine
// told to terminate. After the last restart: every drifted node was replaced exactly once (the
// NodeClaims created over the whole run, from a watch, are the pods' count twice — one machine
// each before and after the drift — and none more), no node is left tainted
// karpenter.sh/disrupted while its claim is not being deleted, every claim bought one machine, no
// machine is left without a claim, and every pod runs on a node of the new template.
func TestCrashDuringDisruption(t *testing.T) {
	seed := setting("DISRUPT_SEED", 1, 1)
	kills := setting("DISRUPT_KILLS", 10, 24)
	replicas := setting("DISRUPT_PODS", 8, 40)
	rng := rand.New(rand.NewPCG(uint64(seed), 11))
	const name = "crash-disrupt"
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: time.Second}
		snc.Spec.InstanceTypes = []string{"m5.large"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(5 * time.Second)
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "25%"}}
	})
	claimLog := h.WatchClaims(t, t.Context(), name)
	spreadDeployment(t, name, name, int32(replicas))
	eventually(t, "every pod Running before the drift", 10*time.Minute, h.Running(t, name, replicas))

	drift(t, name, "2")
	hits, tries := map[string]int{}, 0
	// killAround kills Capstan n times: three times in four at the next crash point in turn (the
	// first time it gets there after a restart), else after a seeded 0.3–5 s.
	killAround := func(n int) {
		for range n {
			h.Stop(syscall.SIGKILL)
			if rng.IntN(4) > 0 {
				point := disruptionPoints[tries%len(disruptionPoints)]
				tries++
				if crashAt(t, point, 1, 20*time.Second) {
					hits[point]++
				}
				if err := start(); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(300+rng.IntN(4700)) * time.Millisecond)
		}
	}
	killAround(kills * 2 / 3)
	eventually(t, "every node of the new template, every pod Running", 15*time.Minute, func(ctx context.Context) (bool, error) {
		claims := h.Claims(t, name)
		for _, c := range claims {
			if c.Labels[generationLabel] != "2" || !c.DeletionTimestamp.IsZero() {
				return false, nil
			}
		}
		running, err := h.Running(t, name, replicas)(ctx)
		return running && len(claims) == replicas, err
	})

	h.Scale(t, name, int32(replicas/2))
	killAround(kills - kills*2/3)
	eventually(t, "the emptied nodes gone, the other pods Running", 10*time.Minute, func(ctx context.Context) (bool, error) {
		running, err := h.Running(t, name, replicas/2)(ctx)
		return running && len(h.Claims(t, name)) == replicas/2, err
	})

	created := len(claimLog.Seen())
	if created != 2*replicas {
		t.Errorf("%d NodeClaims created over the run, want %d: %d before the drift and one replacement per drifted node", created, 2*replicas, replicas)
	}
	tainted := taintedIdle(t)
	if tainted != 0 {
		t.Errorf("%d nodes left tainted %s while their NodeClaim is not being deleted", tainted, karpv1.DisruptedTaintKey)
	}
	for _, c := range h.Claims(t, name) {
		if c.Labels[generationLabel] != "2" {
			t.Errorf("NodeClaim %s is of the old template", c.Name)
		}
	}
	orphans, most := machinesOfClaims(t, name)
	figures("crash-during-disruption seed=%d kills=%d (%d aimed at crash points, died at: %v) pods=%d then %d claims-created=%d (want %d) machines-per-claim(max)=%d orphans-after-gc=%d tainted-idle=%d",
		seed, kills, tries, hits, replicas, replicas/2, created, 2*replicas, most, orphans, tainted)
}

// taintedIdle counts the nodes tainted karpenter.sh/disrupted whose NodeClaim is not being
// deleted (a node being deleted keeps its taint to the end).
func taintedIdle(t *testing.T) int {
	t.Helper()
	deleting := map[string]bool{}
	ncs := &karpv1.NodeClaimList{}
	if err := h.Client.List(t.Context(), ncs); err != nil {
		t.Fatal(err)
	}
	for _, nc := range ncs.Items {
		if !nc.DeletionTimestamp.IsZero() {
			deleting[nc.Status.NodeName] = true
		}
	}
	nodes := &corev1.NodeList{}
	if err := h.Client.List(t.Context(), nodes); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, node := range nodes.Items {
		for _, taint := range node.Spec.Taints {
			if taint.Key == karpv1.DisruptedTaintKey && node.DeletionTimestamp.IsZero() && !deleting[node.Name] {
				n++
			}
		}
	}
	return n
}
