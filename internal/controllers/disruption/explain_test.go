package disruption

import (
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/explain"
	"capstan.dev/capstan/internal/planning"
)

// `kubectl capstan explain nodeclaim` names the blocker of a node left alone — a PDB, the
// do-not-disrupt annotation, a budget of 0 — with the text of the event the controller emits for
// it, and what a round would do with a node it takes.
func TestExplainNodeClaimSaysWhatTheControllerSays(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		edit       func(np *karpv1.NodePool)
		setup      func(f *fixture)
	}{
		{name: "explain-pdb", kind: "PodDisruptionBudget", setup: func(f *fixture) {
			pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
				Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: new(intstr.FromInt32(1)), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
			if err := env.Client.Create(f.t.Context(), pdb); err != nil {
				f.t.Fatal(err)
			}
			pdb.Status = policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0, ObservedGeneration: pdb.Generation}
			if err := env.Client.Status().Update(f.t.Context(), pdb); err != nil {
				f.t.Fatal(err)
			}
		}},
		{name: "explain-dnd", kind: "DoNotDisrupt", setup: func(f *fixture) {
			p := f.pod("explain-dnd-pinned", "explain-dnd-big", "100m")
			orig := p.DeepCopy()
			p.Annotations = map[string]string{karpv1.DoNotDisruptAnnotationKey: "true"}
			if err := env.Client.Patch(f.t.Context(), p, client.MergeFrom(orig)); err != nil {
				f.t.Fatal(err)
			}
		}},
		{name: "explain-budget", kind: "DisruptionBudget", edit: func(np *karpv1.NodePool) {
			np.Spec.Disruption.Budgets = []karpv1.Budget{{Nodes: "0"}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.name, tc.edit)
			f.node(tc.name+"-big", "m5.2xlarge", "500m")
			if tc.setup != nil {
				tc.setup(f)
			}
			f.round(f.ctrl)
			var events []string
			for _, e := range f.events() {
				if strings.Contains(e, "DisruptionBlocked") {
					events = append(events, e)
				}
			}
			a, err := explain.NodeClaim(t.Context(), env.Client, f.cloud.Provider, planning.Settings{}, f.clk.Now(), tc.name+"-big")
			if err != nil {
				t.Fatal(err)
			}
			if a.Blocker == nil || a.Blocker.Kind != tc.kind || a.Blocker.Event != "DisruptionBlocked" {
				t.Fatalf("explain: blocker %+v, want a %s blocker the controller emits DisruptionBlocked for", a.Blocker, tc.kind)
			}
			if len(events) == 0 || !strings.Contains(events[0], a.Blocker.Message) {
				t.Fatalf("explain says %q; the controller's DisruptionBlocked events %q do not say it", a.Blocker.Message, events)
			}
			var out strings.Builder
			if err := a.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			want := "Disruption: left alone (" + tc.kind + "): " + a.Blocker.Message + ".\n"
			if !strings.Contains(out.String(), want) {
				t.Errorf("explain nodeclaim printed:\n%s\nwant a line %q", out.String(), want)
			}
		})
	}

	// A node a round takes: the command, its rule and its saving; and what it was launched for.
	f := newFixture(t, "explain-empty", nil)
	nc, _ := f.node("explain-empty-idle", "m5.xlarge")
	orig := nc.DeepCopy()
	nc.Annotations = map[string]string{planning.LaunchedForAnnotationKey: "2 pod(s): explain-empty/web-0, explain-empty/web-1; instance types, cheapest first: m5.xlarge; 0.1920 $/h"}
	if err := env.Client.Patch(t.Context(), nc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	a, err := explain.NodeClaim(t.Context(), env.Client, f.cloud.Provider, planning.Settings{}, f.clk.Now(), "explain-empty-idle")
	if err != nil {
		t.Fatal(err)
	}
	if a.Command == nil || a.Command.Method != "Emptiness" || a.Command.Rule != "Emptiness: no pods to move" || a.Command.PriceAfter != 0 {
		t.Fatalf("explain of an empty node: %+v, want the emptiness command", a.Command)
	}
	var out strings.Builder
	if err := a.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\nLaunched for 2 pod(s): explain-empty/web-0, explain-empty/web-1; instance types, cheapest first: m5.xlarge; 0.1920 $/h.\n") {
		t.Errorf("explain nodeclaim printed:\n%s\nwant what the claim was launched for", out.String())
	}
}

// `kubectl capstan explain nodeclaim` says why a machine has not initialized (the lifecycle
// controller's message), and calls it stuck past disruptionplan.StartingFor: what a person
// looking at a node that stays wants to know.
func TestExplainNodeClaimSaysWhyItHasNotInitialized(t *testing.T) {
	f := newFixture(t, "explain-stuck", nil)
	nc, _ := f.node("explain-stuck-n", "m5.2xlarge")
	meta.SetStatusCondition(&nc.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeInitialized, Status: metav1.ConditionUnknown,
		Reason: "StartupTaintsExist", Message: "startup taint example.com/taint still on the node"})
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{
		{time.Minute, "Startup: starting: registered, not initialized: startup taint example.com/taint still on the node, 1m0s after it was created.\n"},
		{disruptionplan.StartingFor + time.Minute, "Startup: stuck: registered, not initialized: startup taint example.com/taint still on the node, 16m0s after it was created (past 15m0s: it no longer holds consolidation back"},
	} {
		a, err := explain.NodeClaim(t.Context(), env.Client, f.cloud.Provider, planning.Settings{}, nc.CreationTimestamp.Add(tc.after), nc.Name)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := a.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s after creation, explain nodeclaim printed:\n%s\nwant %q", tc.after, out.String(), tc.want)
		}
	}
}
