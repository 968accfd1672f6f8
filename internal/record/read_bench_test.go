package record_test

import (
	"bytes"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/record"
)

// largeRecording is source's cluster grown to nodes nodes with podsPerNode pods each, every node
// with its claim and a kubelet's labels, every pod of a ReplicaSet with requests: as a recording
// of a large cluster reads.
func largeRecording(b *testing.B, nodes, podsPerNode int) []byte {
	b.Helper()
	r := source(b)
	r.NodeClaims, r.Nodes, r.Pods = nil, nil, nil
	for i := range nodes {
		name := fmt.Sprintf("ip-10-%d-%d-%d.ec2.internal", i/65536, i/256%256, i%256)
		labels := map[string]string{karpv1.NodePoolLabelKey: "default", corev1.LabelHostname: name, corev1.LabelInstanceTypeStable: "m5.large",
			corev1.LabelTopologyZone: "zone-a", karpv1.CapacityTypeLabelKey: "on-demand", corev1.LabelArchStable: "amd64", corev1.LabelOSStable: "linux",
			karpv1.NodeRegisteredLabelKey: "true", karpv1.NodeInitializedLabelKey: "true"}
		nc := karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("default-%05d", i), Labels: labels}}
		nc.Status.NodeName, nc.Status.ProviderID = name, "sim:///"+name
		nc.Status.Capacity = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("29")}
		r.NodeClaims = append(r.NodeClaims, nc)
		r.Nodes = append(r.Nodes, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.NodeSpec{ProviderID: "sim:///" + name},
			Status: corev1.NodeStatus{Capacity: nc.Status.Capacity, Allocatable: nc.Status.Capacity,
				Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}})
		for j := range podsPerNode {
			r.Pods = append(r.Pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%05d-%02d", i, j), Namespace: "default",
				Labels:          map[string]string{"app": "web", "pod-template-hash": "7d4b9c"},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d4b9c", UID: types.UID("rs-web"), Controller: new(true)}}},
				Spec: corev1.PodSpec{NodeName: name, Containers: []corev1.Container{{Name: "app", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("150m"), corev1.ResourceMemory: resource.MustParse("256Mi")}}}}},
				Status: corev1.PodStatus{Phase: corev1.PodRunning}})
		}
	}
	var out bytes.Buffer
	if err := r.Write(&out); err != nil {
		b.Fatal(err)
	}
	return out.Bytes()
}

// BenchmarkReadLargeRecording reads a recording of 5,000 nodes and 50,000 pods, as every command
// given --recording reads it.
func BenchmarkReadLargeRecording(b *testing.B) {
	data := largeRecording(b, 5000, 10)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := record.Read(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		if len(r.Pods) != 50000 {
			b.Fatalf("%d pods", len(r.Pods))
		}
	}
}
