package claimstore

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// BenchmarkCreateThroughput creates 2,000 NodeClaims shaped as the provisioner's (60 candidate
// instance types, three zones, both capacity types, the pool's labels and a resource request)
// with Create, 100 at a time as the provisioner does at its default client rate, against the
// test API server (etcd and kube-apiserver, nothing else running on them), and reports claims
// per second: the API server's own ceiling on how fast a burst's NodeClaims can exist, with the
// client unthrottled ("unlimited") and at Capstan's default rate (KUBE_CLIENT_QPS 200, burst
// 300).
//
//	go test -run XXX -bench BenchmarkCreateThroughput -benchtime 1x ./internal/nodeclaims/
func BenchmarkCreateThroughput(b *testing.B) {
	const claims, workers = 2000, 100
	types := make([]string, 60)
	for i := range types {
		types[i] = fmt.Sprintf("c%d.%dxlarge", 5+i%3, 1+i/3)
	}
	for _, rate := range []struct {
		name       string
		qps, burst int
	}{{"unlimited", -1, 0}, {"qps-200", 200, 300}} {
		b.Run(rate.name, func(b *testing.B) {
			cfg := rest.CopyConfig(env.Config)
			cfg.QPS, cfg.Burst = float32(rate.qps), rate.burst
			c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
			if err != nil {
				b.Fatal(err)
			}
			var elapsed time.Duration
			for b.Loop() {
				names := make(chan int, claims)
				for i := range claims {
					names <- i
				}
				close(names)
				start := time.Now()
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				for range workers {
					wg.Go(func() {
						for range names {
							nc := benchClaim(types)
							if err := Create(b.Context(), c, c, clock.RealClock{}, nc); err != nil {
								errs <- err
								return
							}
						}
					})
				}
				wg.Wait()
				elapsed += time.Since(start)
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := env.Client.DeleteAllOf(b.Context(), &karpv1.NodeClaim{}, client.MatchingLabels{karpv1.NodePoolLabelKey: "bench"}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(claims*b.N)/elapsed.Seconds(), "claims/s")
		})
	}
}

// benchClaim is a NodeClaim as the provisioner writes one for a pool named "bench".
func benchClaim(types []string) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: NewName("bench"),
			Labels:      map[string]string{karpv1.NodePoolLabelKey: "bench", "team": "bench"},
			Annotations: map[string]string{karpv1.NodePoolHashAnnotationKey: "1234567890", karpv1.NodePoolHashVersionAnnotationKey: "v3"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: "capstan.dev", Kind: "SimNodeClass", Name: "default"},
			Requirements: karpv1.Requirements{
				{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: types},
				{Key: corev1.LabelTopologyZone, Operator: karpv1.NodeSelectorOpIn, Values: []string{"zone-a", "zone-b", "zone-c"}},
				{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand", "spot"}},
				{Key: corev1.LabelArchStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"amd64"}},
				{Key: corev1.LabelOSStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"linux"}},
				{Key: karpv1.NodePoolLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"bench"}},
			},
			Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU: resource.MustParse("3500m"), corev1.ResourceMemory: resource.MustParse("7Gi"), corev1.ResourcePods: resource.MustParse("7")}},
		},
	}
}
