package planning

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/spend"
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

// TestRemainingOfASpendingLimit: against a pool's spending limit a launched claim counts the
// offering it runs on (a reserved one at the on-demand price its reservation bills), a claim not
// launched yet the dearest offering its requirements allow of any type it may launch as, and a
// claim of another pool nothing.
func TestRemainingOfASpendingLimit(t *testing.T) {
	offers := func(od float64) []cloudprovider.Offering {
		return []cloudprovider.Offering{
			{Zone: "z1", CapacityType: karpv1.CapacityTypeSpot, Price: od * 0.3, Available: true},
			{Zone: "z1", CapacityType: karpv1.CapacityTypeOnDemand, Price: od, Available: true},
			{Zone: "z1", CapacityType: karpv1.CapacityTypeReserved, Price: cloudprovider.ReservedPrice(od), Available: true, ReservationID: "cr-1"},
		}
	}
	cpu := func(n int64) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: *resource.NewQuantity(n, resource.DecimalSI), corev1.ResourcePods: resource.MustParse("110")}
	}
	small := cloudprovider.NewInstanceType("small", nil, cpu(2), nil, offers(0.10))
	large := cloudprovider.NewInstanceType("large", nil, cpu(8), nil, offers(0.40))
	types := []*cloudprovider.InstanceType{small, large}
	launched := func(name, it, ct string) karpv1.NodeClaim {
		return karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{karpv1.NodePoolLabelKey: "capped",
			karpv1.InstanceTypeLabelKey: it, karpv1.ZoneLabelKey: "z1", karpv1.CapacityTypeLabelKey: ct}},
			Status: karpv1.NodeClaimStatus{Conditions: []metav1.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue}}}}
	}
	inFlight := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "starting", Labels: map[string]string{karpv1.NodePoolLabelKey: "capped"}},
		Spec: karpv1.NodeClaimSpec{Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"small", "large"}},
			{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeSpot}}}}}
	other := launched("elsewhere", "large", karpv1.CapacityTypeOnDemand)
	other.Labels[karpv1.NodePoolLabelKey] = "other"
	claims := []karpv1.NodeClaim{
		launched("spot", "small", karpv1.CapacityTypeSpot),         // 0.03
		launched("reserved", "large", karpv1.CapacityTypeReserved), // 0.40, not ~0
		inFlight, // spot only: the large type's spot offering, 0.12
		other,
	}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "capped"}, Spec: karpv1.NodePoolSpec{Limits: corev1.ResourceList{
		spend.LimitKey: resource.MustParse("1")}}}
	left := remaining(np, claims, types)
	if got, want := left[spend.LimitKey], resource.MustParse("0.45"); got.Cmp(want) != 0 {
		t.Fatalf("spending limit left: %s, want %s (1 − 0.03 − 0.40 − 0.12)", got.String(), want.String())
	}
}

// TestSpendingLeftCountsEveryClaim: the cluster's spending limit counts the claims of every pool,
// a claim of a pool no machine comes from (here: one not among the pools) at the types of all
// pools, and nothing is left below zero; without a limit there is none.
func TestSpendingLeftCountsEveryClaim(t *testing.T) {
	od := func(price float64) []cloudprovider.Offering {
		return []cloudprovider.Offering{{Zone: "z1", CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true}}
	}
	res := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourcePods: resource.MustParse("110")}
	a := Pool{NodePool: &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}
	a.Solver.InstanceTypes = []*cloudprovider.InstanceType{cloudprovider.NewInstanceType("a-type", nil, res, nil, od(0.25))}
	b := Pool{NodePool: &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "b"}}}
	b.Solver.InstanceTypes = []*cloudprovider.InstanceType{cloudprovider.NewInstanceType("b-type", nil, res, nil, od(0.5))}
	claim := func(pool, it string) karpv1.NodeClaim {
		return karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: pool + "-" + it, Labels: map[string]string{karpv1.NodePoolLabelKey: pool,
			karpv1.InstanceTypeLabelKey: it, karpv1.ZoneLabelKey: "z1", karpv1.CapacityTypeLabelKey: karpv1.CapacityTypeOnDemand}},
			Status: karpv1.NodeClaimStatus{Conditions: []metav1.Condition{{Type: karpv1.ConditionTypeLaunched, Status: metav1.ConditionTrue}}}}
	}
	claims := []karpv1.NodeClaim{claim("a", "a-type"), claim("b", "b-type"), claim("static", "b-type")}
	if left := SpendingLeft(2, []Pool{a, b}, claims); left == nil || *left != 0.75 {
		t.Fatalf("left of $2/h after $0.25 + $0.50 + $0.50: %v, want 0.75", left)
	}
	if left := SpendingLeft(1, []Pool{a, b}, claims); left == nil || *left != 0 {
		t.Fatalf("left of $1/h after $1.25/h: %v, want 0", left)
	}
	if left := SpendingLeft(0, []Pool{a, b}, claims); left != nil {
		t.Fatalf("no limit gave %v left", *left)
	}
}

// classesOnly serves one NodeClass kind and nothing else: a PoolFor that goes past its checks
// of the pool itself would call GetInstanceTypes on the nil provider and panic.
type classesOnly struct{ cloudprovider.CloudProvider }

func (classesOnly) NodeClasses() []schema.GroupKind {
	return []schema.GroupKind{{Group: "capstan.dev", Kind: "SimNodeClass"}}
}

// A pool whose template holds a taint or label value no kubelet registers with (stored before
// its CRD refused it) is no pool to plan on: no claim could carry its values to a machine.
func TestPoolWithAnInvalidTemplateIsSkipped(t *testing.T) {
	for name, edit := range map[string]func(*karpv1.NodePool){
		"taint value":         func(np *karpv1.NodePool) { np.Spec.Template.Spec.Taints[0].Value = "x';touch /tmp/p;'" },
		"startup taint value": func(np *karpv1.NodePool) { np.Spec.Template.Spec.StartupTaints[0].Value = "$(id)" },
		"label value":         func(np *karpv1.NodePool) { np.Spec.Template.ObjectMeta.Labels["team"] = "a\nb" },
	} {
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "stale"}}
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"}
		np.Spec.Template.ObjectMeta.Labels = map[string]string{"team": "web"}
		np.Spec.Template.Spec.Taints = karpv1.Taints{{Key: "workload", Value: "web", Effect: corev1.TaintEffectNoSchedule}}
		np.Spec.Template.Spec.StartupTaints = karpv1.Taints{{Key: "agent", Value: "starting", Effect: corev1.TaintEffectNoExecute}}
		edit(np)
		pool, why, err := PoolFor(t.Context(), classesOnly{}, 0, np, nil)
		if pool != nil || why != "invalid template" || err == nil || !strings.Contains(err.Error(), "spec.template.") {
			t.Fatalf("%s: pool %v, %q, %v; want none, as an invalid template naming the field", name, pool, why, err)
		}
	}
}
