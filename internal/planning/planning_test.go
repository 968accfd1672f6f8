package planning

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestProvisionable(t *testing.T) {
	now := metav1.Now()
	cond := func(reason string) []corev1.PodCondition {
		return []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason}}
	}
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want bool
	}{
		{"marked unschedulable", corev1.Pod{Status: corev1.PodStatus{Conditions: cond(corev1.PodReasonUnschedulable)}}, true},
		{"not tried yet by the default scheduler", corev1.Pod{}, true},
		{"not tried yet, default scheduler named", corev1.Pod{Spec: corev1.PodSpec{SchedulerName: corev1.DefaultSchedulerName}}, true},
		{"not tried yet by another scheduler", corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "volcano"}}, false},
		{"another scheduler marked it unschedulable", corev1.Pod{Spec: corev1.PodSpec{SchedulerName: "volcano"},
			Status: corev1.PodStatus{Conditions: cond(corev1.PodReasonUnschedulable)}}, true},
		{"held by a scheduling gate", corev1.Pod{Spec: corev1.PodSpec{SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/wait"}}}}, false},
		{"scheduled", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}}}, false},
		{"bound", corev1.Pod{Spec: corev1.PodSpec{NodeName: "n1"}}, false},
		{"being deleted", corev1.Pod{ObjectMeta: metav1.ObjectMeta{DeletionTimestamp: &now}}, false},
		{"finished", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}, false},
		{"a DaemonSet's", corev1.Pod{ObjectMeta: metav1.ObjectMeta{OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent"}}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Provisionable(&tc.pod); got != tc.want {
				t.Fatalf("Provisionable = %v, want %v", got, tc.want)
			}
		})
	}
}

// A DaemonSet whose pods ask for DRA devices is not charged to machines (as Karpenter); the
// others are, one template pod each.
func TestDaemonSetsWithDRARequirementsAreNotOverhead(t *testing.T) {
	ds := func(name string, claims bool) appsv1.DaemonSet {
		d := appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system"}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c"}}
		if claims {
			d.Spec.Template.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "nic"}}
		}
		return d
	}
	got := DaemonSetPods([]appsv1.DaemonSet{ds("logs", false), ds("dra-driver", true)})
	if len(got) != 1 || got[0].Name != "logs" {
		t.Fatalf("overhead pods %v, want logs alone", got)
	}
}
