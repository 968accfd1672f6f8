package capacitybuffer

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
)

func TestReplicasFollowSIGAutoscalingsRules(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	chunk := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi")}}}}}
	limits := func(cpu string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	}
	for _, c := range []struct {
		name     string
		spec     autoscalingv1beta1.CapacityBufferSpec
		scalable *int32
		want     int32
	}{
		{"replicas", autoscalingv1beta1.CapacityBufferSpec{Replicas: i32(4)}, nil, 4},
		{"percentage of 10, rounded up", autoscalingv1beta1.CapacityBufferSpec{Percentage: i32(25)}, i32(10), 3},
		{"a small percentage is at least one", autoscalingv1beta1.CapacityBufferSpec{Percentage: i32(1)}, i32(10), 1},
		{"the larger of replicas and percentage", autoscalingv1beta1.CapacityBufferSpec{Replicas: i32(2), Percentage: i32(50)}, i32(10), 5},
		{"limits bound the count", autoscalingv1beta1.CapacityBufferSpec{Replicas: i32(8), Limits: limits("3500m")}, nil, 3},
		{"limits alone: as many as fit", autoscalingv1beta1.CapacityBufferSpec{Limits: limits("5")}, nil, 5},
		{"limits of a resource the chunk does not request bound nothing", autoscalingv1beta1.CapacityBufferSpec{Replicas: i32(2),
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}, nil, 2},
		{"nothing set", autoscalingv1beta1.CapacityBufferSpec{}, nil, 0},
	} {
		cb := &autoscalingv1beta1.CapacityBuffer{Spec: c.spec}
		if got := Replicas(cb, chunk, c.scalable); got != c.want {
			t.Errorf("%s: %d chunks, want %d", c.name, got, c.want)
		}
	}
}
