package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pod(name string, created time.Time, phase corev1.PodPhase, ready bool, deleting bool) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}, Status: corev1.PodStatus{Phase: phase}}
	if ready {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	}
	if deleting {
		now := metav1.NewTime(created)
		p.DeletionTimestamp = &now
	}
	return p
}

// The pod Capstan runs as is the newest that runs and is Ready and is not being deleted: during a
// rollout, the new pod once it is Ready, not before.
func TestNewestRunningIsTheRolloutsReadyPod(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	old := pod("old", t0, corev1.PodRunning, true, false)
	starting := pod("new", t0.Add(time.Minute), corev1.PodPending, false, false)
	if got := newestRunning([]corev1.Pod{old, starting}); got == nil || got.Name != "old" {
		t.Fatalf("while the new pod starts: %v, want old", got)
	}
	up := pod("new", t0.Add(time.Minute), corev1.PodRunning, true, false)
	if got := newestRunning([]corev1.Pod{old, up}); got == nil || got.Name != "new" {
		t.Fatalf("once the new pod is Ready: %v, want new", got)
	}
	leaving := pod("newest", t0.Add(2*time.Minute), corev1.PodRunning, true, true)
	notReady := pod("unready", t0.Add(3*time.Minute), corev1.PodRunning, false, false)
	if got := newestRunning([]corev1.Pod{old, up, leaving, notReady}); got == nil || got.Name != "new" {
		t.Fatalf("with a deleting and an unready newer pod: %v, want new", got)
	}
	if got := newestRunning(nil); got != nil {
		t.Fatalf("no pods: %v", got)
	}
}

// Capstan's environment is the host's few variables and the pod's, so a variable removed from the
// Deployment is gone; valueFrom is refused with the variable's name.
func TestPodEnvIsThePodsVariables(t *testing.T) {
	t.Setenv("PATH", "/usr/bin")
	t.Setenv("FEATURE_GATES", "FromTheHost=true")
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "karpenter-1", Namespace: "kube-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Env: []corev1.EnvVar{
			{Name: "SCHEDULER_CONFIG", Value: "a: 1\nb: 2\n"}, {Name: "LEADER_ELECTION_NAME", Value: "karpenter-leader-election"}}}}}}
	env, err := podEnv(p)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(env, "PATH=/usr/bin") || !slices.Contains(env, "SCHEDULER_CONFIG=a: 1\nb: 2\n") || !slices.Contains(env, "LEADER_ELECTION_NAME=karpenter-leader-election") {
		t.Fatalf("env %q", env)
	}
	if slices.ContainsFunc(env, func(s string) bool { return strings.HasPrefix(s, "FEATURE_GATES=") }) {
		t.Fatalf("the host's FEATURE_GATES leaked into %q", env)
	}
	p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: "CLUSTER_NAME", ValueFrom: &corev1.EnvVarSource{}})
	if _, err := podEnv(p); err == nil || !strings.Contains(err.Error(), "CLUSTER_NAME") {
		t.Fatalf("valueFrom: %v, want an error naming CLUSTER_NAME", err)
	}
}
