package chaos

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

// TestAPIServerCrashes: the kube-apiserver is killed and started again twice — once Capstan has
// created the first NodeClaims of a burst of pods that each need a machine (mid-provisioning),
// and once, when every node drifts, as soon as a drain has evicted a pod (mid-drain) — while
// Capstan, the scheduler, the controller manager and kwok keep running. Must hold: exactly one
// NodeClaim per pod and one replacement per drifted node over the whole run (a watch: a pass
// that lost its view and bought again would show), every claim one machine, no machine without
// a claim, every node of the new template, none left tainted, every pod Running. Capstan's failed requests while
// the server was down are counted from its log.
func TestAPIServerCrashes(t *testing.T) {
	replicas := setting("APISERVER_PODS", 12, 20)
	const name = "apiserver-crash"
	pool(t, name, func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.LaunchDelay = &metav1.Duration{Duration: 2 * time.Second}
		snc.Spec.InstanceTypes = []string{"m5.large"}
	}, func(np *karpv1.NodePool) {
		np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "25%"}}
	})
	from := logSize(t)
	claimLog := h.WatchClaims(t, t.Context(), name)
	crash := func() {
		t.Helper()
		if err := h.Cluster.CrashAPIServer(); err != nil {
			t.Fatal(err)
		}
	}
	spreadDeployment(t, name, name, int32(replicas))
	eventually(t, "the burst's first NodeClaims", 2*time.Minute, func(context.Context) (bool, error) {
		return len(h.Claims(t, name)) > 0, nil
	})
	crash()
	eventually(t, "every pod Running after the crash mid-provisioning", 10*time.Minute, h.Running(t, name, replicas))

	// Every node drifts; the crash comes once the drain of the first has evicted a pod.
	drift(t, name, "2")
	drainFrom := logSize(t)
	eventually(t, "a drain evicting a pod", 5*time.Minute, func(context.Context) (bool, error) {
		return logSays(t, drainFrom, `"message":"evicted pod"`), nil
	})
	crash()
	eventually(t, "every node replaced and every pod Running after the crash mid-drain", 10*time.Minute, func(ctx context.Context) (bool, error) {
		for _, c := range h.Claims(t, name) {
			if c.Labels[generationLabel] != "2" || !c.DeletionTimestamp.IsZero() {
				return false, nil
			}
		}
		ok, err := h.Running(t, name, replicas)(ctx)
		return ok && taintedIdle(t) == 0, err
	})
	seen := claimLog.Seen()
	created := len(seen)
	if created != 2*replicas {
		// The names say who bought: the provisioner's are "<pool>-" and five characters, a
		// disruption command's replacements "<pool>-<command>-<n>".
		t.Errorf("%d NodeClaims created over the run, want %d: one per pod, then one replacement per drifted node; created: %s",
			created, 2*replicas, strings.Join(slices.Sorted(maps.Keys(seen)), " "))
	}
	orphans, most := machinesOfClaims(t, name)
	failed := failedRequests(t, from)
	figures("apiserver-crashes pods=%d crashes=2 (mid-provisioning, mid-drain of a drift) claims-created=%d (want %d) machines-per-claim(max)=%d orphans-after-gc=%d tainted-idle=0 capstan-failed-requests=%d",
		replicas, created, 2*replicas, most, orphans, failed)
}

// failedRequests counts Capstan's log lines past offset that report a refused or dropped
// connection to the API server.
func failedRequests(t *testing.T, offset int64) int {
	t.Helper()
	n := 0
	for line := range strings.SplitSeq(logSince(t, offset), "\n") {
		if strings.Contains(line, "connection refused") || strings.Contains(line, "connection reset") || strings.Contains(line, "EOF") {
			n++
		}
	}
	return n
}

// logSays reports whether Capstan's log past offset has a line with text.
func logSays(t *testing.T, offset int64, text string) bool {
	t.Helper()
	return strings.Contains(logSince(t, offset), text)
}

// drift changes the pool's template (label generationLabel), so that every node drifts.
func drift(t *testing.T, pool, generation string) {
	t.Helper()
	np := &karpv1.NodePool{}
	if err := h.Client.Get(t.Context(), client.ObjectKey{Name: pool}, np); err != nil {
		t.Fatal(err)
	}
	orig := np.DeepCopy()
	np.Spec.Template.ObjectMeta.Labels[generationLabel] = generation
	if err := h.Client.Patch(t.Context(), np, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

// generationLabel is the template label the scenarios change to make a pool's nodes drift.
const generationLabel = "chaos.capstan.dev/generation"
