package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/crashpoint"
)

// ChaosFull reports whether the chaos suite's full scenarios run (make chaos), not the short
// ones (make test).
func ChaosFull() bool { return os.Getenv("CAPSTAN_CHAOS") == "full" }

// ChaosSetting is an integer setting of the chaos scenarios: CAPSTAN_CHAOS_<name>, else short
// or long (ChaosFull).
func ChaosSetting(name string, short, long int) int {
	if v, err := strconv.Atoi(os.Getenv("CAPSTAN_CHAOS_" + name)); err == nil && v > 0 {
		return v
	}
	if ChaosFull() {
		return long
	}
	return short
}

// ChaosFigures prints a scenario's line of figures (on stdout, which `go test -v` and make chaos
// show).
func ChaosFigures(format string, args ...any) { fmt.Printf("chaos: "+format+"\n", args...) }

// ClaimRecord is what a watch saw of one NodeClaim.
type ClaimRecord struct {
	// CPU and Memory are the capacity it launched with; Launched says it did.
	CPU, Memory resource.Quantity
	Launched    bool
	// Gone says it was deleted (removed from the API).
	Gone bool
}

// ClaimLog is every NodeClaim of a NodePool a watch saw, in the order the API server wrote them.
type ClaimLog struct {
	mu      sync.Mutex
	seen    map[string]ClaimRecord
	maxLive int
}

// WatchClaims records the pool's NodeClaims from now until ctx ends — every one, not a sample:
// the watch resumes from the last version it saw when the API server ends it.
func (h *Harness) WatchClaims(t testing.TB, ctx context.Context, pool string) *ClaimLog {
	t.Helper()
	wc, err := client.NewWithWatch(h.Cluster.Config, client.Options{Scheme: h.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	sel := client.MatchingLabels{karpv1.NodePoolLabelKey: pool}
	l := &ClaimLog{seen: map[string]ClaimRecord{}}
	// relist records every claim listed and returns the version to watch from.
	relist := func() (string, error) {
		list := &karpv1.NodeClaimList{}
		if err := wc.List(ctx, list, sel); err != nil {
			return "", err
		}
		for i := range list.Items {
			l.record(watch.Added, &list.Items[i])
		}
		return list.ResourceVersion, nil
	}
	rv, err := relist()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ctx.Err() == nil {
			if rv == "" {
				// The version watched from expired (an API server restarted and its watch cache
				// starts afresh): list again. A claim created and deleted in between is missed,
				// but nothing is written while no API server answers.
				if rv, _ = relist(); rv == "" {
					time.Sleep(100 * time.Millisecond)
					continue
				}
			}
			w, err := wc.Watch(ctx, &karpv1.NodeClaimList{}, sel, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					rv = ""
				}
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				switch nc := ev.Object.(type) {
				case *karpv1.NodeClaim:
					rv = nc.ResourceVersion
					if ev.Type != watch.Bookmark {
						l.record(ev.Type, nc)
					}
				case *metav1.Status:
					if ev.Type == watch.Error && (nc.Code == http.StatusGone || nc.Reason == metav1.StatusReasonExpired) {
						rv = ""
					}
				}
			}
		}
	}()
	return l
}

func (l *ClaimLog) record(ev watch.EventType, nc *karpv1.NodeClaim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.seen[nc.Name]
	if c, ok := nc.Status.Capacity[corev1.ResourceCPU]; ok {
		r.CPU, r.Memory, r.Launched = c, nc.Status.Capacity[corev1.ResourceMemory], true
	}
	r.Gone = ev == watch.Deleted
	l.seen[nc.Name] = r
	live := 0
	for _, s := range l.seen {
		if !s.Gone {
			live++
		}
	}
	l.maxLive = max(l.maxLive, live)
}

// Seen is every NodeClaim recorded, by name.
func (l *ClaimLog) Seen() map[string]ClaimRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]ClaimRecord, len(l.seen))
	for k, v := range l.seen {
		out[k] = v
	}
	return out
}

// MaxLive is the most NodeClaims that existed at once.
func (l *ClaimLog) MaxLive() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxLive
}

// CrashAt starts capstan with start, set to die at the n-th hit of the crash point
// (internal/crashpoint), and waits up to timeout for it to die there (true), else kills it
// (false: the point was not reached n times). Either way capstan is stopped afterwards.
func (h *Harness) CrashAt(t testing.TB, start func(env ...string) error, point string, n int, timeout time.Duration) bool {
	t.Helper()
	if err := start(crashpoint.EnvVar + "=" + point + ":" + strconv.Itoa(n)); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	cmd := h.Cmd
	go func() { _ = cmd.Wait(); close(done) }()
	died := true
	select {
	case <-done:
	case <-time.After(timeout):
		died = false
		_ = cmd.Process.Kill()
		<-done
	}
	h.Cmd = nil
	return died && cmd.ProcessState != nil && cmd.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
}

// Scale sets the replicas of the Deployment name in the default namespace.
func (h *Harness) Scale(t testing.TB, name string, replicas int32) {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := h.Client.Get(t.Context(), client.ObjectKey{Namespace: "default", Name: name}, d); err != nil {
		t.Fatal(err)
	}
	orig := d.DeepCopy()
	d.Spec.Replicas = &replicas
	if err := h.Client.Patch(t.Context(), d, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}
