package workload

import (
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
)

// EC2Zones are the zones the EC2 benchmarks offer every type in.
var EC2Zones = []string{"us-east-1a", "us-east-1b", "us-east-1c"}

// EC2SpotFraction is the spot price as a fraction of on-demand in the EC2 benchmarks.
const EC2SpotFraction = 0.35

// EC2InstanceTypes is the embedded catalog with on-demand and spot offerings in EC2Zones.
func EC2InstanceTypes() ([]*cloudprovider.InstanceType, error) {
	entries, err := catalog.Load()
	if err != nil {
		return nil, err
	}
	return catalog.InstanceTypes(entries, catalog.Options{
		Zones: EC2Zones, Spot: true,
		SpotFraction: func(string, string) float64 { return EC2SpotFraction },
	})
}

// Mix names a realistic workload mix for the EC2 benchmarks.
type Mix string

// Mixes.
const (
	MixWeb   Mix = "web"
	MixCache Mix = "cache"
	MixBatch Mix = "batch"
	MixGPU   Mix = "gpu"
	MixMixed Mix = "mixed"
	gpuName      = corev1.ResourceName("nvidia.com/gpu")
)

// MixPods returns the pods of a mix: web is 5,000 small stateless pods; cache 300 memory-heavy
// pods; batch 20 large pods; gpu 16 one-GPU pods; mixed all of them together.
func MixPods(m Mix, seed uint64) []*corev1.Pod {
	r := rand.New(rand.NewPCG(seed, seed))
	var pods []*corev1.Pod
	add := func(prefix string, n int, cpus, mems []string, gpu bool) {
		for i := range n {
			p := Pod(fmt.Sprintf("%s-%d", prefix, i), cpus[r.IntN(len(cpus))], mems[r.IntN(len(mems))], map[string]string{"app": prefix})
			if gpu {
				p.Spec.Containers[0].Resources.Requests[gpuName] = resource.MustParse("1")
			}
			pods = append(pods, p)
		}
	}
	if m == MixWeb || m == MixMixed {
		add("web", 5000, []string{"100m", "250m", "500m"}, []string{"128Mi", "256Mi", "512Mi"}, false)
	}
	if m == MixCache || m == MixMixed {
		add("cache", 300, []string{"500m", "1"}, []string{"8Gi", "16Gi", "32Gi"}, false)
	}
	if m == MixBatch || m == MixMixed {
		add("batch", 20, []string{"16", "24", "32"}, []string{"64Gi", "128Gi"}, false)
	}
	if m == MixGPU || m == MixMixed {
		add("train", 16, []string{"4"}, []string{"16Gi"}, true)
	}
	return pods
}
