package disruption

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/crashpoint"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/pods"
)

// CommandAnnotationKey is on the NodeClaims a disruption command is disrupting, with the
// command's state (commandState as JSON), until they are deleted or the command rolls back; the
// decision core reads its replacements' names from it (disruptionplan.CommandAnnotationKey).
const CommandAnnotationKey = disruptionplan.CommandAnnotationKey

// commandState is a command in flight, as recorded on its candidates.
type commandState struct {
	ID     string                  `json:"id"`
	Method disruptionplan.Method   `json:"method"`
	Reason karpv1.DisruptionReason `json:"reason"`
	// Replacements are the names of the NodeClaims launched first.
	Replacements []string  `json:"replacements,omitempty"`
	Started      time.Time `json:"started"`
	// PriceBefore and PriceAfter are the hourly prices of candidates and replacements.
	PriceBefore float64 `json:"priceBefore"`
	PriceAfter  float64 `json:"priceAfter"`
	// Savings are the hourly saving attributed to each pool (by its candidates' share of the
	// price before).
	Savings map[string]float64 `json:"savings,omitempty"`
	// candidates are the claims' names (not stored: the annotated claims are the candidates).
	candidates []string
}

func (s *commandState) consolidationType() string {
	switch s.Method {
	case disruptionplan.MethodEmptiness:
		return "empty"
	case disruptionplan.MethodSingleNode:
		return "single"
	case disruptionplan.MethodMultiNode:
		return "multi"
	}
	return ""
}

func (s *commandState) decision() string {
	if len(s.Replacements) > 0 {
		return "replace"
	}
	return "delete"
}

func candidateNames(cmd *disruptionplan.Command) []string {
	out := make([]string, 0, len(cmd.Candidates))
	for _, c := range cmd.Candidates {
		out = append(out, c.NodeClaim.Name)
	}
	return out
}

// execute starts a command: it records the command on the candidates, taints their nodes,
// creates the replacements and, when there are none, deletes the candidates at once.
func (c *Controller) execute(ctx context.Context, opts Options, snap *disruptionplan.Snapshot, cmd *disruptionplan.Command) (time.Duration, error) {
	st := &commandState{ID: rand.String(8), Method: cmd.Method, Reason: cmd.Reason, Started: c.Clock.Now().UTC().Truncate(time.Second),
		PriceBefore: cmd.PriceBefore, PriceAfter: cmd.PriceAfter, candidates: candidateNames(cmd), Savings: map[string]float64{}}
	for _, cand := range cmd.Candidates {
		if cmd.PriceBefore > 0 {
			st.Savings[cand.Pool.NodePool.Name] += cmd.Savings() * cand.Price / cmd.PriceBefore
		}
	}
	pools := map[string]*karpv1.NodePool{}
	for _, p := range snap.NodePools {
		pools[p.NodePool.Name] = p.NodePool
	}
	claims := make([]*karpv1.NodeClaim, 0, len(cmd.Replacements))
	for _, r := range cmd.Replacements {
		np := pools[r.NodePool]
		if np == nil {
			return opts.PollPeriod, fmt.Errorf("replacement from NodePool %s, which is not in the snapshot", r.NodePool)
		}
		nc := planning.NewNodeClaim(np, r)
		nc.Name = claimstore.NameFor(np.Name, fmt.Sprintf("%s-%d", st.ID, len(claims)))
		nc.Annotations[disruptionplan.ReplacementAnnotationKey] = string(cmd.Method)
		nodeclaims.ReservePods(nc, r.Pods)
		claims = append(claims, nc)
		st.Replacements = append(st.Replacements, nc.Name)
	}
	logger := log.FromContext(ctx).WithValues("command", st.ID, "method", st.Method, "reason", st.Reason)
	// The command is recorded before anything else, so that a restart finds it.
	value, err := json.Marshal(st)
	if err != nil {
		return 0, err
	}
	for _, cand := range cmd.Candidates {
		if err := c.annotate(ctx, cand.NodeClaim, string(value)); err != nil {
			c.rollback(ctx, st, fmt.Sprintf("recording the command on %s failed: %v", cand.NodeClaim.Name, err))
			return opts.PollPeriod, nil
		}
	}
	c.active = st
	crashpoint.Hit(crashpoint.DisruptionRecorded)
	for _, cand := range cmd.Candidates {
		if err := c.taint(ctx, cand.NodeClaim.Status.NodeName, true); err != nil {
			c.rollback(ctx, st, fmt.Sprintf("tainting node %s failed: %v", cand.NodeClaim.Status.NodeName, err))
			return opts.FailureBackoff, nil
		}
	}
	crashpoint.Hit(crashpoint.DisruptionTainted)
	for i, nc := range claims {
		err := claimstore.Create(ctx, c.Client, c.APIReader, c.Clock, nc)
		switch {
		case err == nil || apierrors.IsAlreadyExists(err):
			// Counted as Karpenter counts a disruption's replacements: by the reason, lower case.
			c.Metrics.Created(cmd.Replacements[i].NodePool, strings.ToLower(string(st.Reason)), cmd.Replacements[i].MinValuesRelaxed)
		case claimstore.IsUnresolved(err):
			// The replacement may exist: the command goes on, and its next step reads the
			// replacement from the API server (gone: rolled back; there: carried on).
			logger.Error(err, "replacement's create unresolved; the command's next step looks for it", "NodeClaim", nc.Name)
		default:
			c.rollback(ctx, st, fmt.Sprintf("creating replacement %s failed: %v", nc.Name, err))
			return opts.FailureBackoff, nil
		}
	}
	if len(claims) > 0 {
		crashpoint.Hit(crashpoint.ReplacementsCreated)
	}
	logger.Info("disrupting node(s)", "nodeclaims", st.candidates, "replacements", st.Replacements,
		"price-before", fmt.Sprintf("%.4f", st.PriceBefore), "price-after", fmt.Sprintf("%.4f", st.PriceAfter), "pods", len(cmd.Pods()),
		"rule", cmd.Rule())
	for _, cand := range cmd.Candidates {
		c.Recorder.Eventf(cand.NodeClaim, nil, corev1.EventTypeNormal, "DisruptionLaunching", "Disrupt", "%s", describe(st, cmd))
	}
	if len(claims) == 0 {
		return c.finish(ctx, opts, st)
	}
	return 2 * time.Second, nil
}

// describe is a command as events tell it.
func describe(st *commandState, cmd *disruptionplan.Command) string {
	s := fmt.Sprintf("Disrupting %s: %s/%s", few(st.candidates), st.Reason, st.decision())
	if len(st.Replacements) > 0 {
		var types []string
		for _, r := range cmd.Replacements {
			types = append(types, r.InstanceTypes[0].Name)
		}
		s += fmt.Sprintf(", replacing with %s (%s)", few(st.Replacements), few(types))
	}
	return s + fmt.Sprintf(", $%.4f/h → $%.4f/h, %d pod(s) evicted; %s", st.PriceBefore, st.PriceAfter, len(cmd.Pods()), cmd.Rule())
}

// shown is how many names an event lists before "and N more": a command over a hundred nodes
// would otherwise fill the event (the events API keeps 1 KiB) before its prices and rule.
const shown = 5

// few lists the names, the first shown of them when there are more.
func few(names []string) string {
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
}

// advance carries the command in flight one step: it deletes the candidates once every
// replacement is initialized, rolls it back when a replacement is gone or the timeout passed, and
// otherwise waits. It also un-taints nodes no command owns. It reports whether a command is in
// flight.
func (c *Controller) advance(ctx context.Context, opts Options) (bool, time.Duration, error) {
	ncs := &karpv1.NodeClaimList{}
	// Read only (writes read their object again): the cache's objects, not copies.
	if err := c.Client.List(ctx, ncs, client.UnsafeDisableDeepCopy); err != nil {
		return false, 0, fmt.Errorf("listing nodeclaims: %w", err)
	}
	commands := map[string]*commandState{}
	if c.active != nil {
		commands[c.active.ID] = c.active
	}
	for i := range ncs.Items {
		nc := &ncs.Items[i]
		v, ok := nc.Annotations[CommandAnnotationKey]
		if !ok || !nc.DeletionTimestamp.IsZero() {
			continue
		}
		st := &commandState{}
		if err := json.Unmarshal([]byte(v), st); err != nil || st.ID == "" {
			// Not ours to understand: drop it, and the node's taint with it.
			log.FromContext(ctx).Info("removing an unreadable disruption command annotation", "NodeClaim", klog.KObj(nc), "value", v)
			if err := c.annotate(ctx, nc, ""); err != nil {
				return false, 0, err
			}
			continue
		}
		if c.isDone(st.ID) {
			continue
		}
		if known, ok := commands[st.ID]; ok {
			st = known
		} else {
			commands[st.ID] = st
		}
		if !slices.Contains(st.candidates, nc.Name) {
			st.candidates = append(st.candidates, nc.Name)
		}
	}
	if err := c.untaintStray(ctx, ncs.Items, commands); err != nil {
		return false, 0, err
	}
	if len(commands) == 0 {
		c.active = nil
		return false, 0, nil
	}
	wait := opts.PollPeriod
	for _, st := range commands {
		w, err := c.step(ctx, opts, st)
		if err != nil {
			return true, 0, err
		}
		wait = min(wait, w)
	}
	return true, wait, nil
}

// step advances one command.
func (c *Controller) step(ctx context.Context, opts Options, st *commandState) (time.Duration, error) {
	ready := true
	for _, name := range st.Replacements {
		nc := &karpv1.NodeClaim{}
		err := c.APIReader.Get(ctx, client.ObjectKey{Name: name}, nc)
		switch {
		case apierrors.IsNotFound(err):
			c.rollback(ctx, st, fmt.Sprintf("replacement %s is gone", name))
			return opts.FailureBackoff, nil
		case err != nil:
			return 0, fmt.Errorf("reading replacement %s: %w", name, err)
		case !nc.DeletionTimestamp.IsZero():
			c.rollback(ctx, st, fmt.Sprintf("replacement %s is being deleted", name))
			return opts.FailureBackoff, nil
		}
		if !meta.IsStatusConditionTrue(nc.Status.Conditions, karpv1.ConditionTypeInitialized) {
			ready = false
		}
	}
	if ready {
		return c.finish(ctx, opts, st)
	}
	if c.Clock.Since(st.Started) > opts.ReplacementTimeout {
		c.rollback(ctx, st, fmt.Sprintf("replacements %s did not initialize within %s", strings.Join(st.Replacements, ", "), opts.ReplacementTimeout))
		return opts.FailureBackoff, nil
	}
	// Candidates tainted before a restart stay tainted; a restart between recording and tainting
	// taints now.
	for _, name := range st.candidates {
		nc := &karpv1.NodeClaim{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, nc); err != nil {
			continue
		}
		if err := c.taint(ctx, nc.Status.NodeName, true); err != nil {
			return 0, err
		}
	}
	return 2 * time.Second, nil
}

// finish deletes the command's candidates: the termination controller drains them.
func (c *Controller) finish(ctx context.Context, opts Options, st *commandState) (time.Duration, error) {
	var errs []error
	evicted := map[string]int{}
	for _, name := range st.candidates {
		nc := &karpv1.NodeClaim{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: name}, nc); err != nil {
			errs = append(errs, client.IgnoreNotFound(err))
			continue
		}
		pool := nc.Labels[karpv1.NodePoolLabelKey]
		remembered := false
		if node, err := claimstore.NodeFor(ctx, c.Client, nc); err == nil && node != nil {
			onNode := &corev1.PodList{}
			if err := c.Client.List(ctx, onNode, client.MatchingFields{"spec.nodeName": node.Name}); err == nil {
				for i := range onNode.Items {
					p := &onNode.Items[i]
					if pods.Reschedulable(p) {
						evicted[pool]++
						if st.Reason == karpv1.DisruptionReasonUnderutilized {
							c.remember(p)
							remembered = true
						}
					}
				}
			}
		}
		if remembered {
			// Saved before the claim goes: a crash in between must not forget these pods.
			if err := c.saveMemory(ctx); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		if err := c.Client.Delete(ctx, nc); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("deleting nodeclaim %s: %w", name, err))
			continue
		}
		crashpoint.Hit(crashpoint.CandidateDeleted)
		policy := ""
		np := &karpv1.NodePool{}
		if err := c.Client.Get(ctx, client.ObjectKey{Name: pool}, np); err == nil {
			policy = string(np.Spec.Disruption.ConsolidationPolicy)
		}
		c.Metrics.DisruptedVoluntarily(nc, strings.ToLower(string(st.Reason)), policy)
		c.Recorder.Eventf(nc, nil, corev1.EventTypeNormal, "DisruptionTerminating", "Disrupt", "Disrupting NodeClaim: %s/%s", st.Reason, st.decision())
	}
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	c.Metrics.DisruptionCommand(st.decision(), string(st.Reason), st.consolidationType(), evicted, st.Savings)
	log.FromContext(ctx).Info("deleted disrupted nodeclaim(s)", "command", st.ID, "nodeclaims", st.candidates)
	c.markDone(st.ID)
	return opts.PollPeriod, nil
}

// remember records a pod consolidation is about to evict, for the churn guard; records older
// than the guard's memory are dropped.
func (c *Controller) remember(p *corev1.Pod) {
	now := c.Clock.Now()
	memory := c.Options.Decision.ChurnMemory()
	c.evictions = slices.DeleteFunc(c.evictions, func(e disruptionplan.Eviction) bool { return now.Sub(e.At) >= memory })
	e := disruptionplan.Eviction{Namespace: p.Namespace, Name: p.Name, At: now}
	if o := metav1.GetControllerOf(p); o != nil {
		e.Owner = o.UID
	}
	c.evictions = append(c.evictions, e)
}

// doneMemory is how long a finished or rolled-back command is remembered: longer than the cache
// takes to show the controller's own writes.
const doneMemory = 2 * time.Minute

// markDone records that the command is over.
func (c *Controller) markDone(id string) {
	now := c.Clock.Now()
	if c.done == nil {
		c.done = map[string]time.Time{}
	}
	for k, at := range c.done {
		if now.Sub(at) > doneMemory {
			delete(c.done, k)
		}
	}
	c.done[id] = now
	if c.active != nil && c.active.ID == id {
		c.active = nil
	}
}

// isDone reports whether the command finished or rolled back here recently.
func (c *Controller) isDone(id string) bool {
	at, ok := c.done[id]
	return ok && c.Clock.Since(at) <= doneMemory
}
