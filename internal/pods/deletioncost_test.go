package pods

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Who set a deletion cost decides whether Capstan may change it and whether it is a user's cost.
func TestDeletionCostOwners(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ann       map[string]string
		owner     DeletionCostOwner
		cost      int32
		userCosts bool
	}{
		{"nothing", nil, DeletionCostUnset, 0, false},
		{"Capstan's", map[string]string{corev1.PodDeletionCost: "-5", DeletionCostRecordKey: "-5"}, DeletionCostCapstan, 0, false},
		{"a user's", map[string]string{corev1.PodDeletionCost: "-5"}, DeletionCostUser, -5, true},
		{"changed by a user", map[string]string{corev1.PodDeletionCost: "4", DeletionCostRecordKey: "-5"}, DeletionCostTaken, 4, true},
		{"removed by a user", map[string]string{DeletionCostRecordKey: "-5"}, DeletionCostTaken, 0, false},
		{"unreadable", map[string]string{corev1.PodDeletionCost: "cheap"}, DeletionCostUser, 0, false},
		{"karpenter.sh/disruption-cost wins", map[string]string{DisruptionCostKey: "100", corev1.PodDeletionCost: "-5", DeletionCostRecordKey: "-5"},
			DeletionCostCapstan, 100, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
			if got := DeletionCostOf(p); got != tc.owner {
				t.Errorf("owner %d, want %d", got, tc.owner)
			}
			if cost, ok := UserEvictionCost(p); ok != tc.userCosts || cost != tc.cost {
				t.Errorf("user eviction cost %d (%t), want %d (%t)", cost, ok, tc.cost, tc.userCosts)
			}
		})
	}
}
