package e2e

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// ClaimFigures are what the burst benchmarks report of a pool's NodeClaims: when the last one was
// created, and how many registered ones have a Node whose allocatable differs from the claim's
// (or no Node to read).
func ClaimFigures(ctx context.Context, c client.Reader, ncs []karpv1.NodeClaim) (last time.Time, mismatched int) {
	for _, nc := range ncs {
		if nc.CreationTimestamp.After(last) {
			last = nc.CreationTimestamp.Time
		}
		if nc.Status.NodeName == "" {
			continue // not registered yet (a claim for pods that already run elsewhere)
		}
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, node); err != nil ||
			!equality.Semantic.DeepEqual(node.Status.Allocatable, nc.Status.Allocatable) {
			mismatched++
		}
	}
	return last, mismatched
}
