package aws

import (
	"context"
	"fmt"
	"testing"
	"time"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/test/awsfake"
)

// TestEC2Faults: the local EC2 endpoint fails a share of every EC2 call — RequestLimitExceeded,
// InternalError or Unavailable; CreateFleet, TerminateInstances and the other writes half the
// time after taking effect, their answer lost — and (full version) leaves another share
// unanswered until Capstan's deadline; meanwhile a burst of pods that each need a machine comes,
// and then half of them go. Must hold: every pod Running, every NodeClaim one live instance (a
// fleet whose answer was lost is found again, not bought twice), the emptied machines
// terminated, no instance without a NodeClaim. Instances are counted over every one the endpoint
// ever launched, so a double purchase that garbage collection later cleaned up still fails.
func TestEC2Faults(t *testing.T) {
	errorsPct := setting("FAULT_ERRORS", 25, 20)
	hangsPct := setting("FAULT_HANGS", -1, 3)
	n := setting("FAULT_PODS", 8, 30)
	rates := awsfake.FaultRates{ErrorPercent: errorsPct, HangPercent: max(hangsPct, 0)}
	const name = "ec2-faults"
	pool(t, name, karpv1.CapacityTypeOnDemand, nil)
	// The first launch's answer is lost whatever the draws: the case that buys twice when the
	// retry does not find the machine.
	cloud.InjectFault("CreateFleet", 1, awsfake.Fault{Code: "InternalError", Message: "An internal error has occurred.", Status: 500, After: true})
	cloud.SetFaultRates(rates, 1)
	defer cloud.SetFaultRates(awsfake.FaultRates{}, 0)
	began := time.Now()
	spreadDeployment(t, name, int32(n))
	eventually(t, "every pod Running through the faults", 20*time.Minute, h.Running(t, name, n))
	running := time.Since(began)
	h.Scale(t, name, int32(n/2))
	eventually(t, "the emptied machines terminated through the faults", 10*time.Minute, func(ctx context.Context) (bool, error) {
		ok, err := h.Running(t, name, n/2)(ctx)
		return ok && len(h.Claims(t, name)) == n/2 && len(cloud.LiveInstances(karpv1.NodePoolLabelKey, name)) == n/2, err
	})
	injected := cloud.InjectedFaults()
	cloud.SetFaultRates(awsfake.FaultRates{}, 0)
	launched, most := instancesPerClaim(t, name)
	left := orphans(t, name)
	if left != 0 {
		t.Errorf("%d instances without a NodeClaim", left)
	}
	figures("ec2-faults faults=%s pods=%d then %d injected=%v all-running-after=%s instances-launched-per-claim(max)=%d claims=%d orphans=%d",
		fmt.Sprintf("errors=%d%%,hangs=%d%%", rates.ErrorPercent, rates.HangPercent), n, n/2, injected, running.Round(time.Second), most, len(launched), left)
}
