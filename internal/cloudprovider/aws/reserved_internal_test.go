package aws

import "testing"

// The provider's kube-reserved CPU is the EKS AMIs' documented rule — 6% of the first core, 1% of
// the second, 0.5% of the third and fourth, 0.25% of every further one — in worked values (the
// fake kubelet is checked against the same values, from its own statement of the rule).
func TestKubeReservedCPUWorkedValues(t *testing.T) {
	for vcpus, want := range map[int64]int64{1: 60, 2: 70, 3: 75, 4: 80, 8: 90, 16: 110, 32: 150, 48: 190, 64: 230, 96: 310, 192: 550, 448: 1190} {
		if got := kubeReservedCPU(vcpus); got != want {
			t.Errorf("%d vCPUs: %dm reserved, want %dm", vcpus, got, want)
		}
	}
}
