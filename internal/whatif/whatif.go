// Package whatif answers "what would Capstan do to this cluster — and what if I changed this?":
// it reads the cluster (live, or a recording) as the disruption controller does, and plays it
// forward on a simulated clock through the solver and the disruption decision core
// (internal/replay) until nothing more happens, once as configured and once with the changes.
// It is what `kubectl capstan simulate` prints.
package whatif

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/pods"
	"capstan.dev/capstan/internal/replay"
	"capstan.dev/capstan/internal/snapshot"
)

// Defaults of Options.
const (
	// DefaultHorizon bounds the simulated time.
	DefaultHorizon = 2 * time.Hour
	// DefaultQuiet is how long nothing must happen for the cluster to count as settled: longer
	// than a default consolidateAfter and a validation period together.
	DefaultQuiet = 10 * time.Minute
)

// Changes are what the user asks to try.
type Changes struct {
	// Policy, when set, is every NodePool's consolidationPolicy.
	Policy karpv1.ConsolidationPolicy
	// NodePools are applied: each replaces the NodePool of its name, or is added.
	NodePools []*karpv1.NodePool
	// RemoveNodePools are taken out; their machines stay, as other nodes pods may use.
	RemoveNodePools []string
	// SpotToSpotConsolidation, when set, overrides the gate of that name.
	SpotToSpotConsolidation *bool
	// Scale sets Deployments' replica counts.
	Scale []Scale
}

// Scale is a Deployment's replica count to try.
type Scale struct {
	Namespace, Deployment string
	Replicas              int
}

// Empty reports whether nothing is changed.
func (ch Changes) Empty() bool {
	return ch.Policy == "" && len(ch.NodePools) == 0 && len(ch.RemoveNodePools) == 0 && ch.SpotToSpotConsolidation == nil &&
		len(ch.Scale) == 0
}

// Options say how to simulate.
type Options struct {
	// Now is the time of the reading (a recording's time for a recording).
	Now time.Time
	// Settings are Capstan's settings planning reads (NODE_COST, SPENDING_LIMIT).
	planning.Settings
	// Decision are the decision core's options Capstan runs with (feature gates, k).
	Decision disruptionplan.Options
	// Horizon bounds the simulated time (DefaultHorizon); Quiet is how long nothing happens
	// before the cluster counts as settled (DefaultQuiet).
	Horizon, Quiet time.Duration
}

// Answer is the cluster now, and where it settles as configured and with the changes.
type Answer struct {
	Now     Fleet    `json:"now"`
	Settled Outcome  `json:"settled"`
	Changed *Outcome `json:"changed,omitempty"`
}

// Fleet is the cluster at one time.
type Fleet struct {
	Nodes int `json:"nodes"`
	// Price is the machines' hourly price, with per-node costs ($/h).
	Price float64 `json:"price"`
	// Pending counts pods waiting; Unschedulable says why those no machine can hold wait.
	Pending       int              `json:"pending"`
	Unschedulable []string         `json:"unschedulable,omitempty"`
	Machines      []replay.Machine `json:"machines"`
}

// Outcome is where a simulation settled and what it took to get there.
type Outcome struct {
	Fleet
	// After is the simulated time it took; Settled is false when the horizon came first.
	After   time.Duration `json:"after"`
	Settled bool          `json:"settledWithinHorizon"`
	// Evictions counts pods evicted; MovedTwice those evicted again; Lost the evicted pods no
	// controller recreates.
	Evictions  int `json:"evictions"`
	MovedTwice int `json:"movedTwice"`
	Lost       int `json:"lost,omitempty"`
	// Removed and Launched name the machines that went and came.
	Removed  []string `json:"removed,omitempty"`
	Launched []string `json:"launched,omitempty"`
	// Commands are the disruption commands carried out, one line each.
	Commands []string `json:"commands,omitempty"`
}

// Simulate reads the cluster through c and cloud and plays it forward as configured and, when
// changes are given, with them.
func Simulate(ctx context.Context, c client.Reader, cloud cloudprovider.CloudProvider, ch Changes, o Options) (*Answer, error) {
	if o.Horizon <= 0 {
		o.Horizon = DefaultHorizon
	}
	if o.Quiet <= 0 {
		o.Quiet = DefaultQuiet
	}
	snap, err := snapshot.Read(ctx, c, cloud, snapshot.Options{Now: o.Now, Settings: o.Settings})
	if err != nil {
		return nil, err
	}
	a := &Answer{Now: fleet(snap)}
	settled, err := play(snap, o.Decision, o)
	if err != nil {
		return nil, err
	}
	a.Settled = *settled
	if ch.Empty() {
		return a, nil
	}
	changed := &overlay{Reader: c, changes: ch}
	if err := changed.check(ctx); err != nil {
		return nil, err
	}
	snap, err = snapshot.Read(ctx, changed, cloud, snapshot.Options{Now: o.Now, Settings: o.Settings})
	if err != nil {
		return nil, err
	}
	if err := scale(ctx, c, snap, ch.Scale); err != nil {
		return nil, err
	}
	dec := o.Decision
	if ch.SpotToSpotConsolidation != nil {
		dec.SpotToSpotConsolidation = *ch.SpotToSpotConsolidation
	}
	if a.Changed, err = play(snap, dec, o); err != nil {
		return nil, err
	}
	return a, nil
}

// fleet is the snapshot's machines, priced as the decision core prices them.
func fleet(snap *disruptionplan.Snapshot) Fleet {
	c, err := replay.FromSnapshot(snap, replay.Config{})
	if err != nil {
		return Fleet{}
	}
	f := Fleet{Machines: c.Machines(), Pending: len(snap.Pending)}
	for _, m := range f.Machines {
		f.Price += m.Price
	}
	f.Nodes = len(f.Machines)
	return f
}

// play runs the snapshot forward until it has been quiet for o.Quiet or the horizon passed.
func play(snap *disruptionplan.Snapshot, dec disruptionplan.Options, o Options) (*Outcome, error) {
	out := &Outcome{}
	c, err := replay.FromSnapshot(snap, replay.Config{Disruption: dec, Log: func(s string) { out.Commands = append(out.Commands, s) }})
	if err != nil {
		return nil, err
	}
	before := map[string]bool{}
	for _, m := range c.Machines() {
		before[m.Name] = true
	}
	step := 10 * time.Second
	var quietSince time.Duration
	for at := time.Duration(0); at < o.Horizon; at += step {
		n, p := c.Nodes(), c.Price()
		c.Step()
		if !c.Quiet() || c.Nodes() != n || c.Price() != p {
			quietSince = at + step
		}
		if at+step-quietSince >= o.Quiet {
			out.Settled = true
			out.After = quietSince
			break
		}
	}
	if !out.Settled {
		out.After = o.Horizon
	}
	r := c.Report()
	out.Evictions, out.MovedTwice, out.Lost = r.Evictions, r.Reevictions, r.Lost
	out.Machines = c.Machines()
	out.Nodes, out.Price, out.Pending = len(out.Machines), c.Price(), c.Pending()
	now := map[string]bool{}
	for _, m := range out.Machines {
		now[m.Name] = true
		if !before[m.Name] {
			out.Launched = append(out.Launched, fmt.Sprintf("%s (%s %s)", m.InstanceType, m.CapacityType, m.NodePool))
		}
	}
	for name := range before {
		if !now[name] {
			out.Removed = append(out.Removed, name)
		}
	}
	slices.Sort(out.Removed)
	for _, pe := range c.Unschedulable() {
		out.Unschedulable = append(out.Unschedulable, pe.Pod.Namespace+"/"+pe.Pod.Name+": "+pe.Reason)
	}
	return out, nil
}

// overlay is the cluster with the changes' NodePools.
type overlay struct {
	client.Reader
	changes Changes
}

// check refuses changes that name NodePools that do not exist.
func (o *overlay) check(ctx context.Context) error {
	nps := &karpv1.NodePoolList{}
	if err := o.Reader.List(ctx, nps); err != nil {
		return fmt.Errorf("listing nodepools: %w", err)
	}
	var errs []error
	for _, name := range o.changes.RemoveNodePools {
		if !slices.ContainsFunc(nps.Items, func(np karpv1.NodePool) bool { return np.Name == name }) {
			errs = append(errs, fmt.Errorf("--remove-nodepool %s: no NodePool of that name", name))
		}
	}
	return errors.Join(errs...)
}

func (o *overlay) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := o.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	nps, ok := list.(*karpv1.NodePoolList)
	if !ok {
		return nil
	}
	items := slices.DeleteFunc(nps.Items, func(np karpv1.NodePool) bool {
		return slices.Contains(o.changes.RemoveNodePools, np.Name) ||
			slices.ContainsFunc(o.changes.NodePools, func(x *karpv1.NodePool) bool { return x.Name == np.Name })
	})
	for _, np := range o.changes.NodePools {
		items = append(items, *np.DeepCopy())
	}
	for i := range items {
		if o.changes.Policy != "" {
			items[i].Spec.Disruption.ConsolidationPolicy = o.changes.Policy
		}
	}
	nps.Items = items
	return nil
}

// WriteText prints the answer as a table, then the machines removed and launched and the
// commands of each simulation.
func (a *Answer) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	cols := []string{"", "NOW", "SETTLED AS CONFIGURED"}
	outs := []*Outcome{&a.Settled}
	if a.Changed != nil {
		cols = append(cols, "SETTLED WITH THE CHANGES")
		outs = append(outs, a.Changed)
	}
	fmt.Fprintln(tw, strings.Join(cols, "\t"))
	row := func(name string, now string, f func(*Outcome) string) {
		cells := []string{name, now}
		for _, o := range outs {
			cells = append(cells, f(o))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	row("nodes", fmt.Sprint(a.Now.Nodes), func(o *Outcome) string { return fmt.Sprint(o.Nodes) })
	row("$/h", fmt.Sprintf("%.3f", a.Now.Price), func(o *Outcome) string { return fmt.Sprintf("%.3f", o.Price) })
	row("pods pending", fmt.Sprint(a.Now.Pending), func(o *Outcome) string { return fmt.Sprint(o.Pending) })
	row("pods evicted", "-", func(o *Outcome) string { return fmt.Sprint(o.Evictions) })
	row("nodes removed", "-", func(o *Outcome) string { return fmt.Sprint(len(o.Removed)) })
	row("nodes launched", "-", func(o *Outcome) string { return fmt.Sprint(len(o.Launched)) })
	row("settled after", "-", func(o *Outcome) string {
		if !o.Settled {
			return fmt.Sprintf("not within %s", o.After)
		}
		return o.After.String()
	})
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, o := range outs {
		title := "As configured"
		if i == 1 {
			title = "With the changes"
		}
		fmt.Fprintf(w, "\n%s:\n", title)
		list := func(what string, items []string) {
			if len(items) > 0 {
				fmt.Fprintf(w, "  %s: %s\n", what, strings.Join(items, ", "))
			}
		}
		list("removed", o.Removed)
		list("launched", o.Launched)
		for _, c := range o.Commands {
			fmt.Fprintf(w, "  %s\n", c)
		}
		for _, u := range o.Unschedulable {
			fmt.Fprintf(w, "  pending: %s\n", u)
		}
		if len(o.Commands) == 0 && len(o.Unschedulable) == 0 {
			fmt.Fprintln(w, "  nothing to do")
		}
	}
	return nil
}

// scale sets the Deployments' pod counts in the snapshot, as their ReplicaSets would: a scale-in
// deletes pending pods first, then the lowest controller.kubernetes.io/pod-deletion-cost, then
// the newest; a scale-out adds pending copies of one of its pods.
func scale(ctx context.Context, c client.Reader, snap *disruptionplan.Snapshot, scales []Scale) error {
	if len(scales) == 0 {
		return nil
	}
	rss := &appsv1.ReplicaSetList{}
	if err := c.List(ctx, rss); err != nil {
		return fmt.Errorf("listing replicasets: %w", err)
	}
	for _, sc := range scales {
		owners := map[string]bool{}
		for _, rs := range rss.Items {
			if o := metav1.GetControllerOf(&rs); rs.Namespace == sc.Namespace && o != nil && o.Kind == "Deployment" && o.Name == sc.Deployment {
				owners[rs.Name] = true
			}
		}
		of := func(p *corev1.Pod) bool {
			o := metav1.GetControllerOf(p)
			return p.Namespace == sc.Namespace && o != nil && o.Kind == "ReplicaSet" && owners[o.Name] && pods.Reschedulable(p)
		}
		type placed struct {
			pod  *corev1.Pod
			node *disruptionplan.Node
		}
		var all []placed
		for _, p := range snap.Pending {
			if of(p) {
				all = append(all, placed{pod: p})
			}
		}
		for _, n := range snap.Nodes {
			for _, p := range n.Pods {
				if of(p) {
					all = append(all, placed{pod: p, node: n})
				}
			}
		}
		if len(all) == 0 {
			return fmt.Errorf("--scale deployment/%s=%d: no pods of Deployment %s/%s", sc.Deployment, sc.Replicas, sc.Namespace, sc.Deployment)
		}
		for i := len(all); i < sc.Replicas; i++ {
			q := recreate(all[0].pod, i)
			snap.Pending = append(snap.Pending, q)
		}
		if len(all) <= sc.Replicas {
			continue
		}
		cost := func(p *corev1.Pod) int {
			v, _ := strconv.Atoi(p.Annotations[corev1.PodDeletionCost])
			return v
		}
		slices.SortStableFunc(all, func(a, b placed) int {
			if (a.node == nil) != (b.node == nil) {
				if a.node == nil {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(cost(a.pod), cost(b.pod)), b.pod.CreationTimestamp.Compare(a.pod.CreationTimestamp.Time))
		})
		for _, d := range all[:len(all)-sc.Replicas] {
			if d.node == nil {
				snap.Pending = slices.DeleteFunc(snap.Pending, func(p *corev1.Pod) bool { return p == d.pod })
			} else {
				d.node.Pods = slices.DeleteFunc(d.node.Pods, func(p *corev1.Pod) bool { return p == d.pod })
			}
		}
	}
	return nil
}

// recreate is a new pending pod like p, as its ReplicaSet makes.
func recreate(p *corev1.Pod, i int) *corev1.Pod {
	q := p.DeepCopy()
	q.Name, q.UID = fmt.Sprintf("%s-scaled-%d", p.Name, i), types.UID(fmt.Sprintf("%s-scaled-%d", p.UID, i))
	q.Spec.NodeName = ""
	q.Status = corev1.PodStatus{Phase: corev1.PodPending}
	delete(q.Annotations, corev1.PodDeletionCost)
	return q
}
