package planning

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/provreq"
)

// Booked marks unschedulable in st the nodes of the claims booked for ProvisioningRequests at now
// (their room is kept for the requests' pods) and returns, per request, how many claims are booked.
func Booked(st *State, claims []karpv1.NodeClaim, now time.Time) map[types.NamespacedName]int {
	booked := map[types.NamespacedName]int{}
	for i := range claims {
		req, ok := provreq.Booked(&claims[i], now)
		if !ok {
			continue
		}
		booked[req]++
		if idx, ok := st.InFlight[claims[i].Name]; ok {
			st.Nodes[idx].Unschedulable = true
		}
		if idx, ok := st.ClaimNode[claims[i].Name]; ok {
			st.Nodes[idx].Unschedulable = true
		}
	}
	return booked
}
