package explain

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodepools"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/snapshot"
	"capstan.dev/capstan/internal/solver"
	"capstan.dev/capstan/internal/spend"
)

// NodePoolAnswer says what a NodePool holds and allows now.
type NodePoolAnswer struct {
	NodePool string `json:"nodePool"`
	// Managed is false when new machines do not come from the pool (static, being deleted,
	// another provider's, its NodeClass not ready, invalid requirements); Why says which.
	Managed bool   `json:"managed"`
	Why     string `json:"why,omitempty"`
	// Nodes counts its NodeClaims; Price is their hourly price (offerings plus per-node cost).
	Nodes int     `json:"nodes"`
	Price float64 `json:"price"`
	// Limits are spec.limits with what is left for new machines (in-flight claims counted at the
	// largest capacity they may launch as).
	Limits []LimitUse `json:"limits,omitempty"`
	// Disruptions are, per reason, how many more nodes the budgets allow now.
	Disruptions []Allowed `json:"disruptions,omitempty"`
	// InstanceTypes counts the types its requirements admit; Cheapest are the cheapest few.
	InstanceTypes int         `json:"instanceTypes"`
	Cheapest      []TypePrice `json:"cheapest,omitempty"`
	// RegistrationUnhealthy, when set, is why the pool's NodeRegistrationHealthy is False: it is
	// tried after every other pool, and replacements that need it wait.
	RegistrationUnhealthy string `json:"registrationUnhealthy,omitempty"`
	// Rollout is where a rollout of the pool's template or NodeClass has its nodes, as its
	// capstan.dev/RolledOut condition says ("" before the controller has written it).
	Rollout string `json:"rollout,omitempty"`
}

// LimitUse is one limit of a pool.
type LimitUse struct {
	Resource string `json:"resource"`
	Limit    string `json:"limit"`
	Left     string `json:"left"`
}

// Allowed is what the budgets allow a reason now.
type Allowed struct {
	Reason string `json:"reason"`
	// Nodes is how many more nodes may be disrupted (-1: no budget applies).
	Nodes int `json:"nodes"`
	// Budget is the index of the deciding budget in spec.disruption.budgets (-1: none); Rule is
	// that budget as written (its nodes, and its schedule and duration when it has one); Until
	// is when its schedule window closes.
	Budget int       `json:"budget"`
	Rule   string    `json:"rule,omitempty"`
	Until  time.Time `json:"until,omitzero"`
	Error  string    `json:"error,omitempty"`
}

// budgetRule is a budget as its manifest reads: `nodes: "10%"`, with its reasons, schedule and
// duration when it has them.
func budgetRule(b karpv1.Budget) string {
	rule := fmt.Sprintf("nodes: %q", b.Nodes)
	if len(b.Reasons) > 0 {
		var rs []string
		for _, r := range b.Reasons {
			rs = append(rs, string(r))
		}
		rule += ", reasons: " + strings.Join(rs, ", ")
	}
	if b.Schedule != nil {
		rule += fmt.Sprintf(", schedule: %q", *b.Schedule)
	}
	if b.Duration != nil {
		rule += ", duration: " + b.Duration.Duration.String()
	}
	return rule
}

// TypePrice is an instance type with the price of its cheapest offering the pool allows (capacity
// type and zone), plus the pool's per-node cost.
type TypePrice struct {
	Name  string  `json:"name"`
	Price float64 `json:"price"`
}

// cheapestShown is how many of a pool's cheapest types an answer lists.
const cheapestShown = 5

// NodePool reads the cluster as the disruption controller does and answers for the pool: its
// nodes and their price, its limits and what is left of them, what the budgets allow each
// reason now (the decision core's allowances), and the instance types it admits.
func NodePool(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, set planning.Settings, now time.Time, name string) (*NodePoolAnswer, error) {
	np := &karpv1.NodePool{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, np); err != nil {
		return nil, fmt.Errorf("nodepool %s: %w", name, err)
	}
	a := &NodePoolAnswer{NodePool: name}
	snap, err := snapshot.Read(ctx, c, cloud, snapshot.Options{Now: now, Settings: set})
	if err != nil {
		return nil, err
	}
	var pool *disruptionplan.Pool
	for i := range snap.NodePools {
		if snap.NodePools[i].NodePool.Name == name {
			pool = &snap.NodePools[i]
		}
	}
	if pool == nil {
		_, why, err := planning.PoolFor(ctx, cloud, set.NodeCost, np, nil)
		if cf := cloudFailure(name, why, err); cf != nil {
			return nil, cf
		}
		a.Why = why
		if err != nil {
			a.Why += ": " + err.Error()
		}
		ncs := &karpv1.NodeClaimList{}
		if err := c.List(ctx, ncs, client.MatchingLabels{karpv1.NodePoolLabelKey: name}); err != nil {
			return nil, fmt.Errorf("listing nodeclaims: %w", err)
		}
		a.Nodes = len(ncs.Items)
		return a, nil
	}
	a.Managed = true
	if c := meta.FindStatusCondition(np.Status.Conditions, karpv1.ConditionTypeNodeRegistrationHealthy); c != nil && c.Status == metav1.ConditionFalse {
		a.RegistrationUnhealthy = c.Reason + ": " + c.Message
	}
	if c := meta.FindStatusCondition(np.Status.Conditions, nodepools.ConditionTypeRolledOut); c != nil {
		a.Rollout = c.Reason + ": " + c.Message
	}
	for _, n := range snap.Nodes {
		if n.NodeClaim.Labels[karpv1.NodePoolLabelKey] != name {
			continue
		}
		a.Nodes++
		if p, ok := disruptionplan.NodePrice(n, pool); ok {
			a.Price += p
		}
	}
	for _, r := range slices.Sorted(maps.Keys(np.Spec.Limits)) {
		left, lim := pool.Solver.Remaining[r], np.Spec.Limits[r]
		use := LimitUse{Resource: string(r), Limit: lim.String(), Left: left.String()}
		if r == spend.LimitKey {
			// Dollars per hour: what the claims may cost is spent, in-flight ones at their worst.
			use.Limit, use.Left = dollars(lim), dollars(left)
		}
		a.Limits = append(a.Limits, use)
	}
	d := disruptionplan.Decide(snap, disruptionplan.Options{})
	for _, reason := range []karpv1.DisruptionReason{karpv1.DisruptionReasonEmpty, karpv1.DisruptionReasonDrifted, karpv1.DisruptionReasonUnderutilized} {
		al, ok := d.Allowances[name][reason]
		if !ok {
			continue
		}
		out := Allowed{Reason: string(reason), Nodes: al.Allowed, Budget: al.Budget, Until: al.Until}
		if al.Budget >= 0 && al.Budget < len(np.Spec.Disruption.Budgets) {
			out.Rule = budgetRule(np.Spec.Disruption.Budgets[al.Budget])
		}
		if al.Allowed == math.MaxInt32 {
			out.Nodes = -1
		}
		if al.Err != nil {
			out.Error = al.Err.Error()
		}
		a.Disruptions = append(a.Disruptions, out)
	}
	// Admitted as the solver admits a type: labels its requirements allow, and an available
	// offering in a zone and capacity type they allow.
	for _, it := range pool.Solver.InstanceTypes {
		if it.Requirements.Intersects(pool.Solver.Requirements) != nil {
			continue
		}
		if low, ok := solver.CheapestOffering(it, pool.Solver.Requirements); ok {
			a.InstanceTypes++
			a.Cheapest = append(a.Cheapest, TypePrice{Name: it.Name, Price: low + pool.Solver.NodeCost})
		}
	}
	sort.SliceStable(a.Cheapest, func(i, j int) bool { return a.Cheapest[i].Price < a.Cheapest[j].Price })
	a.Cheapest = a.Cheapest[:min(len(a.Cheapest), cheapestShown)]
	return a, nil
}

// WriteText prints the answer for a person.
func (a *NodePoolAnswer) WriteText(w io.Writer) error {
	var b strings.Builder
	if !a.Managed {
		fmt.Fprintf(&b, "NodePool %s: %d node(s); Capstan launches nothing from it: %s.\n", a.NodePool, a.Nodes, a.Why)
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "NodePool %s: %d node(s), %.4f $/h.\n", a.NodePool, a.Nodes, a.Price)
	if a.Rollout != "" {
		fmt.Fprintf(&b, "Rollout: %s.\n", a.Rollout)
	}
	if a.RegistrationUnhealthy != "" {
		fmt.Fprintf(&b, "Its launches do not register (%s=False, %s): it is tried after every other NodePool, and disruption does not replace nodes onto it.\n",
			karpv1.ConditionTypeNodeRegistrationHealthy, a.RegistrationUnhealthy)
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	if len(a.Limits) > 0 {
		fmt.Fprintln(tw, "LIMIT\tOF\tLEFT")
		for _, l := range a.Limits {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", l.Resource, l.Limit, l.Left)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		b.WriteString("No limits.\n")
	}
	b.WriteString("\n")
	fmt.Fprintln(tw, "DISRUPTION REASON\tNODES ALLOWED NOW\tBY")
	for _, d := range a.Disruptions {
		allowed, by := fmt.Sprint(d.Nodes), fmt.Sprintf("budget %d (%s)", d.Budget, d.Rule)
		if d.Nodes < 0 {
			allowed = "any"
		}
		if d.Budget < 0 {
			by = "no budget applies"
		}
		if !d.Until.IsZero() {
			by += " until " + d.Until.UTC().Format(time.RFC3339)
		}
		if d.Error != "" {
			by = d.Error
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", d.Reason, allowed, by)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(&b, "\n%d instance type(s) admitted; cheapest:", a.InstanceTypes)
	for _, t := range a.Cheapest {
		fmt.Fprintf(&b, " %s %.4f $/h,", t.Name, t.Price)
	}
	s := strings.TrimSuffix(b.String(), ",") + "\n"
	_, err := io.WriteString(w, s)
	return err
}

// dollars is an hourly price as the spending limit's rows show it.
func dollars(q resource.Quantity) string {
	return fmt.Sprintf("$%.3f/h", q.AsApproximateFloat64())
}
