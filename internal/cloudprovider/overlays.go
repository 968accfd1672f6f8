package cloudprovider

import (
	"context"
	"fmt"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Overlays adjusts the instance types a NodePool's machines are chosen from (Karpenter's
// NodeOverlay: prices of selected offerings, extended resources added to selected types).
type Overlays interface {
	// Apply returns the NodePool's instance types as adjusted, sharing what is unchanged and never
	// modifying its. It returns a *OverlaysPendingError while the NodePool's overlays have not
	// been evaluated yet: deciding on unadjusted prices would buy what the overlays forbid.
	Apply(nodePool string, its []*InstanceType) ([]*InstanceType, error)
}

// OverlaysPendingError is a NodePool whose NodeOverlays have not been evaluated yet (just after a
// start, or a NodePool created since the last evaluation); the next evaluation follows.
type OverlaysPendingError struct {
	NodePool string
}

func (e *OverlaysPendingError) Error() string {
	return fmt.Sprintf("the NodeOverlays of NodePool %s are not evaluated yet", e.NodePool)
}

// WithOverlays wraps a provider so that GetInstanceTypes answers with the NodePool's instance
// types as o adjusts them: the solver, consolidation's savings, the cost metrics and the explain
// answers all read prices and capacity through it. Launches apply the same overlays inside the
// provider (sim.Provider.SetOverlays, aws.Provider.SetOverlays), so that the machine bought is
// the one the decision priced.
func WithOverlays(cp CloudProvider, o Overlays) CloudProvider {
	return &overlaid{CloudProvider: cp, o: o}
}

type overlaid struct {
	CloudProvider
	o Overlays
}

func (p *overlaid) GetInstanceTypes(ctx context.Context, np *karpv1.NodePool) ([]*InstanceType, error) {
	its, err := p.CloudProvider.GetInstanceTypes(ctx, np)
	if err != nil {
		return nil, err
	}
	return p.o.Apply(np.Name, its)
}
