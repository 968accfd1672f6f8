package whatif_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/record"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/whatif"
)

var at = time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)

// cluster is a recording of one pool of m5.xlarge (4 CPU) machines, each full with four 900m pods
// of Deployment web (through ReplicaSet web-abc).
func cluster(t *testing.T, nodes int) *record.Recording {
	t.Helper()
	ref := &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"}
	np := karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	np.Spec.Template.Spec.NodeClassRef = ref
	np.Spec.Disruption = karpv1.Disruption{ConsolidationPolicy: karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized,
		ConsolidateAfter: karpv1.NewDuration(0), Budgets: []karpv1.Budget{{Nodes: "100%"}}}
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"), corev1.ResourcePods: resource.MustParse("58")}
	r := &record.Recording{APIVersion: record.APIVersion, Kind: record.Kind, RecordedAt: metav1.NewTime(at), CloudProvider: "sim",
		NodeClasses: []metav1.GroupKind{{Group: "capstan.dev", Kind: "SimNodeClass"}},
		InstanceTypes: []record.NodeClassInstanceType{{NodeClass: "capstan.dev/SimNodeClass/default", InstanceTypes: []record.InstanceType{{
			Name: "m5.xlarge", Capacity: capacity,
			Requirements: []corev1.NodeSelectorRequirement{
				{Key: karpv1.InstanceTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"m5.xlarge"}},
				{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"on-demand"}},
				{Key: karpv1.ZoneLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a"}},
			},
			Offerings: []record.Offering{{Zone: "zone-a", CapacityType: "on-demand", Price: 0.192, Available: true}},
		}}}},
		NodePools: []karpv1.NodePool{np},
		ReplicaSets: []appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Name: "web-abc", Namespace: "default", UID: "rs-web",
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: "d-web", Controller: new(true)}}}}},
	}
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i)
		labels := map[string]string{karpv1.NodePoolLabelKey: "default", karpv1.InstanceTypeLabelKey: "m5.xlarge", karpv1.ZoneLabelKey: "zone-a",
			karpv1.CapacityTypeLabelKey: "on-demand", corev1.LabelHostname: name}
		nc := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(at.Add(-time.Hour))}}
		nc.Spec.NodeClassRef = ref
		nc.Status.ProviderID, nc.Status.NodeName, nc.Status.Capacity, nc.Status.Allocatable = "sim:///"+name, name, capacity, capacity
		for _, c := range []string{karpv1.ConditionTypeLaunched, karpv1.ConditionTypeRegistered, karpv1.ConditionTypeInitialized, karpv1.ConditionTypeConsolidatable} {
			nc.Status.Conditions = append(nc.Status.Conditions, metav1.Condition{Type: c, Status: metav1.ConditionTrue, Reason: c, LastTransitionTime: metav1.NewTime(at.Add(-time.Hour))})
		}
		r.NodeClaims = append(r.NodeClaims, nc)
		r.Nodes = append(r.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{ProviderID: "sim:///" + name},
			Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity, Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
		for j := range 4 {
			r.Pods = append(r.Pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-abc-%d-%d", i, j), Namespace: "default", UID: types.UID(fmt.Sprintf("p-%d-%d", i, j)),
				Labels: map[string]string{"app": "web"}, CreationTimestamp: metav1.NewTime(at.Add(-time.Hour)),
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-abc", UID: "rs-web", Controller: new(true)}}},
				Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("900m"), corev1.ResourceMemory: resource.MustParse("1Gi")}}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}})
		}
	}
	return r
}

func simulate(t *testing.T, r *record.Recording, ch whatif.Changes) *whatif.Answer {
	t.Helper()
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := r.Cloud()
	if err != nil {
		t.Fatal(err)
	}
	a, err := whatif.Simulate(context.Background(), r.Reader(s), cloud, ch, whatif.Options{Now: at})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Scaling a Deployment in: the scale-in empties machines, which emptiness removes; scaling it out
// launches machines for the new pods. As configured, the full cluster stays as it is.
func TestScaleChangesTheFleet(t *testing.T) {
	a := simulate(t, cluster(t, 4), whatif.Changes{Scale: []whatif.Scale{{Namespace: "default", Deployment: "web", Replicas: 8}}})
	if a.Now.Nodes != 4 || a.Settled.Nodes != 4 || len(a.Settled.Removed) != 0 {
		t.Errorf("as configured: now %d nodes, settled %d, removed %v; want 4 full nodes kept", a.Now.Nodes, a.Settled.Nodes, a.Settled.Removed)
	}
	if a.Changed == nil || a.Changed.Nodes != 2 || len(a.Changed.Removed) != 2 || a.Changed.Pending != 0 {
		t.Fatalf("web scaled to 8: %+v; want 2 nodes left, 2 removed", a.Changed)
	}
	if a.Changed.Evictions != 0 {
		t.Errorf("web scaled to 8: %d evictions; the scale-in took whole machines (newest pods first, then the emptied ones go)", a.Changed.Evictions)
	}
	up := simulate(t, cluster(t, 1), whatif.Changes{Scale: []whatif.Scale{{Namespace: "default", Deployment: "web", Replicas: 12}}})
	if up.Changed == nil || up.Changed.Nodes != 3 || up.Changed.Pending != 0 || len(up.Changed.Launched) != 2 {
		t.Errorf("web scaled to 12 from 4: %+v; want 2 machines launched", up.Changed)
	}
	s, err := scheme.New()
	if err != nil {
		t.Fatal(err)
	}
	r := cluster(t, 1)
	cloud, _ := r.Cloud()
	_, err = whatif.Simulate(context.Background(), r.Reader(s), cloud, whatif.Changes{Scale: []whatif.Scale{{Namespace: "default", Deployment: "api", Replicas: 1}}}, whatif.Options{Now: at})
	if err == nil || !strings.Contains(err.Error(), "no pods of Deployment default/api") {
		t.Errorf("scaling a Deployment without pods: %v", err)
	}
}
