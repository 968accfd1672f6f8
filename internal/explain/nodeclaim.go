package explain

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/snapshot"
)

// NodeClaimAnswer says what a NodeClaim is and what disruption would do with it now.
type NodeClaimAnswer struct {
	NodeClaim    string `json:"nodeClaim"`
	NodePool     string `json:"nodePool,omitempty"`
	Node         string `json:"node,omitempty"`
	InstanceType string `json:"instanceType,omitempty"`
	CapacityType string `json:"capacityType,omitempty"`
	Zone         string `json:"zone,omitempty"`
	// Pods counts the pods bound to its node (DaemonSet pods included).
	Pods int `json:"pods"`
	// LaunchedFor is what provisioning or a disruption replacement planned the claim for: its
	// pods, its instance types and price (planning.LaunchedFor); empty for a claim Capstan did
	// not launch.
	LaunchedFor string `json:"launchedFor,omitempty"`
	// Drifted is the Drifted condition's reason and message, when it is true.
	Drifted string `json:"drifted,omitempty"`
	// Startup says, for a claim not initialized, how far it got and why it waits (its
	// conditions' messages), and, once past disruptionplan.StartingFor, that it is stuck.
	Startup string `json:"startup,omitempty"`
	// Disrupted says the claim is being deleted already.
	Disrupted bool `json:"disrupted,omitempty"`
	// Command is what disruption would do with the claim this round, if it acts on it.
	Command *Command `json:"command,omitempty"`
	// Blocker is why the round leaves the claim alone (the text of the controller's event, when
	// it emits one), and Settling why consolidation waits this round.
	Blocker  *Blocker `json:"blocker,omitempty"`
	Settling string   `json:"settling,omitempty"`
}

// Command is a disruption command that takes the claim.
type Command struct {
	Method       string   `json:"method"`
	Rule         string   `json:"rule"`
	NodeClaims   []string `json:"nodeClaims"`
	Replacements []string `json:"replacements,omitempty"`
	PriceBefore  float64  `json:"priceBefore"`
	PriceAfter   float64  `json:"priceAfter"`
	PodsMoved    int      `json:"podsMoved"`
}

// Blocker is why the decision core leaves a claim alone.
type Blocker struct {
	// Event is the event reason the controller emits for it ("" when it emits none).
	Event   string `json:"event,omitempty"`
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

// NodeClaim reads the cluster as the disruption controller does (snapshot.Read) and runs one
// round of the decision core (disruptionplan.Decide, default options) to say what it would do with
// the claim now. A fresh read has no memory of scale-downs seen earlier or of the churn guard's
// evictions: only owners with more replicas than they want count as shrinking.
func NodeClaim(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, set planning.Settings, now time.Time, name string) (*NodeClaimAnswer, error) {
	nc := &karpv1.NodeClaim{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, nc); err != nil {
		return nil, fmt.Errorf("nodeclaim %s: %w", name, err)
	}
	a := &NodeClaimAnswer{NodeClaim: nc.Name, NodePool: nc.Labels[karpv1.NodePoolLabelKey], Node: nc.Status.NodeName,
		InstanceType: nc.Labels[karpv1.InstanceTypeLabelKey], CapacityType: nc.Labels[karpv1.CapacityTypeLabelKey],
		Zone: nc.Labels[karpv1.ZoneLabelKey], Disrupted: !nc.DeletionTimestamp.IsZero(), LaunchedFor: nc.Annotations[planning.LaunchedForAnnotationKey]}
	if cond := meta.FindStatusCondition(nc.Status.Conditions, karpv1.ConditionTypeDrifted); cond != nil && cond.Status == "True" {
		a.Drifted = strings.TrimSpace(cond.Reason + ": " + cond.Message)
	}
	a.Startup = startup(nc, now)
	snap, err := snapshot.Read(ctx, c, cloud, snapshot.Options{Now: now, Settings: set})
	if err != nil {
		return nil, err
	}
	var node *disruptionplan.Node
	for _, n := range snap.Nodes {
		if n.NodeClaim.Name == name {
			node = n
		}
	}
	if node == nil {
		a.Blocker = &Blocker{Kind: "NotManaged", Message: "its NodePool is not one Capstan launches for (static, being deleted, another provider's, or gone)"}
		return a, nil
	}
	a.Pods = len(node.Pods)
	if a.Disrupted {
		return a, nil
	}
	d := disruptionplan.Decide(snap, disruptionplan.Options{})
	a.Settling = d.Settling
	if cmd := d.Command; cmd != nil {
		for _, cand := range cmd.Candidates {
			if cand.NodeClaim.Name != name {
				continue
			}
			out := &Command{Method: string(cmd.Method), Rule: cmd.Rule(), PriceBefore: cmd.PriceBefore, PriceAfter: cmd.PriceAfter, PodsMoved: len(cmd.Pods())}
			for _, c := range cmd.Candidates {
				out.NodeClaims = append(out.NodeClaims, c.NodeClaim.Name)
			}
			for _, r := range cmd.Replacements {
				if len(r.InstanceTypes) > 0 {
					out.Replacements = append(out.Replacements, r.InstanceTypes[0].Name)
				}
			}
			a.Command = out
			return a, nil
		}
	}
	for _, e := range d.Explanations {
		if e.Node.NodeClaim.Name == name {
			a.Blocker = &Blocker{Event: e.Event, Kind: e.Kind, Message: e.Message}
			return a, nil
		}
	}
	return a, nil
}

// startup says how far a claim not initialized got and why it waits, from the conditions the
// lifecycle controller keeps; "" for an initialized claim.
func startup(nc *karpv1.NodeClaim, now time.Time) string {
	if meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized) {
		return ""
	}
	step := func(t, waiting string) string {
		if c := meta.FindStatusCondition(nc.Status.Conditions, t); c != nil && c.Message != "" {
			return waiting + ": " + c.Message
		}
		return waiting
	}
	var what string
	switch {
	case !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeLaunched):
		what = step(karpv1.ConditionTypeLaunched, "not launched")
	case !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeRegistered):
		what = step(karpv1.ConditionTypeRegistered, "launched, its node not registered")
	default:
		what = step(karpv1.ConditionTypeInitialized, "registered, not initialized")
	}
	age := now.Sub(nc.CreationTimestamp.Time).Truncate(time.Second)
	if age >= disruptionplan.StartingFor {
		return fmt.Sprintf("stuck: %s, %s after it was created (past %s: it no longer holds consolidation back and no disruption moves pods onto it; expireAfter, repair when it turns unhealthy, or a person removes it)",
			what, age, disruptionplan.StartingFor)
	}
	return fmt.Sprintf("starting: %s, %s after it was created", what, age)
}

// WriteText prints the answer for a person.
func (a *NodeClaimAnswer) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "NodeClaim %s (NodePool %s): %s %s in %s, node %s, %d pod(s).\n", a.NodeClaim, a.NodePool,
		orDash(a.InstanceType), orDash(a.CapacityType), orDash(a.Zone), orDash(a.Node), a.Pods)
	if a.LaunchedFor != "" {
		fmt.Fprintf(&b, "Launched for %s.\n", a.LaunchedFor)
	}
	if a.Drifted != "" {
		fmt.Fprintf(&b, "Drifted: %s.\n", a.Drifted)
	}
	if a.Startup != "" {
		fmt.Fprintf(&b, "Startup: %s.\n", a.Startup)
	}
	switch {
	case a.Disrupted:
		b.WriteString("Disruption: being deleted now.\n")
	case a.Command != nil:
		fmt.Fprintf(&b, "Disruption: this round would take it (%s): %s.\n", a.Command.Method, a.Command.Rule)
		fmt.Fprintf(&b, "  NodeClaims %s, %d pod(s) moved, %.4f -> %.4f $/h", strings.Join(a.Command.NodeClaims, ", "), a.Command.PodsMoved,
			a.Command.PriceBefore, a.Command.PriceAfter)
		if len(a.Command.Replacements) > 0 {
			fmt.Fprintf(&b, ", replaced by %s", strings.Join(a.Command.Replacements, ", "))
		}
		b.WriteString(".\n")
	case a.Blocker != nil:
		fmt.Fprintf(&b, "Disruption: left alone (%s): %s.\n", a.Blocker.Kind, a.Blocker.Message)
	default:
		b.WriteString("Disruption: nothing to do with it this round.\n")
	}
	if a.Settling != "" {
		fmt.Fprintf(&b, "Consolidation waits this round: %s.\n", a.Settling)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
