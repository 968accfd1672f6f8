package disruptionplan

import (
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/solver"
)

// terminateFirst is, for a drift or repair (gate: TerminateFirstDrift or TerminateFirstRepair)
// whose candidate's pods have no room, the command that deletes the candidate before anything is
// launched — when the candidate holds a machine of a capacity reservation and, with that machine
// given back, every pod has room, the ones that need a new machine on that reservation's. A
// replacement cannot be launched first: the reservation has no machine left until the candidate
// gives its own back (Karpenter v1.15's terminate-first disruption). The pods wait pending while
// the candidate drains and terminates; provisioning then launches into the freed machine. Nil
// otherwise: the candidate stays, explained as before.
func (d *decider) terminateFirst(c *Candidate, m Method, reason karpv1.DisruptionReason, gate bool) *Command {
	id := c.NodeClaim.Labels[cloudprovider.ReservationIDLabelKey]
	if !gate || c.CapacityType != karpv1.CapacityTypeReserved || id == "" {
		return nil
	}
	pools := make([]solver.NodePool, len(d.sim.pools))
	for i, p := range d.sim.pools {
		p.InstanceTypes = cloudprovider.CreditReservation(p.InstanceTypes, id)
		pools[i] = p
	}
	res := d.sim.runWith([]*Candidate{c}, pools)
	if res.failed != "" {
		return nil
	}
	for _, r := range res.replacements {
		// Only the freed machine: a pod that needs any other would not have room then either.
		if rid, ok := r.Requirements.Get(cloudprovider.ReservationIDLabelKey); !ok || !rid.Allows(id) {
			return nil
		}
	}
	cmd := &Command{Method: m, Reason: reason, Candidates: []*Candidate{c}, Bindings: res.bindings, PriceBefore: c.Price,
		TerminateFirst: "its pods' only room is capacity reservation " + id + "'s machine it holds"}
	return cmd
}
