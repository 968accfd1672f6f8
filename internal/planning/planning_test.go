package planning

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
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
	got := DaemonSetPods([]appsv1.DaemonSet{ds("logs", false), ds("dra-driver", true)}, nil, nil)
	if len(got) != 1 || got[0].Name != "logs" {
		t.Fatalf("overhead pods %v, want logs alone", got)
	}
}

// TestRemainingOfAbsurdLimits: a limit the CRD admits with an exponent no pool can reach
// ("1e71000100", or "-1e71000100") is counted down as ±10^18 (nodepools.Bounded), not with
// resource.Quantity's arithmetic on the exponent, which takes minutes per claim.
func TestRemainingOfAbsurdLimits(t *testing.T) {
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: karpv1.NodePoolSpec{Limits: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1e71000100"), corev1.ResourceMemory: resource.MustParse("-1e71000100"),
		karpv1.ResourceNodes: resource.MustParse("10")}}}
	claim := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{karpv1.NodePoolLabelKey: "default"}},
		Status: karpv1.NodeClaimStatus{
			Capacity:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			Conditions: []metav1.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue}}}}
	left := remaining(np, []karpv1.NodeClaim{claim}, nil)
	want := map[corev1.ResourceName]int64{corev1.ResourceCPU: 1e18 - 4, corev1.ResourceMemory: 0, karpv1.ResourceNodes: 9}
	for k, v := range want {
		if q := left[k]; q.CmpInt64(v) != 0 {
			t.Errorf("%s left: %s, want %d", k, q.String(), v)
		}
	}
}
