package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/report"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/internal/trace"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// run runs the plugin with args and returns what it printed and its error.
func run(args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	root := newRoot(&out, &errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func TestExplainPod(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cls := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "plugin"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "plugin"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "plugin"}
	np.Spec.Template.Spec.Taints = []corev1.Taint{{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "default"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}}}}}
	for _, o := range []client.Object{cls, np, pod} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}

	out, _, err := run("explain", "pod", "db-0", "-n", "default", "--kubeconfig", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	want := `Pod default/db-0 is pending: no NodePool can launch a machine for it.
Closest: NodePool plugin (taint): taint dedicated=db:NoSchedule not tolerated.
To fit there: add a toleration for the taint to the pod, or use a NodePool without it.

NODEPOOL  FAILED CHECK  REASON
plugin    taint         taint dedicated=db:NoSchedule not tolerated
`
	if out != want {
		t.Errorf("explain pod printed:\n%s\nwant:\n%s", out, want)
	}

	out, _, err = run("explain", "pod", "db-0", "-n", "default", "--kubeconfig", kubeconfig, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Pod     string
		Closest struct{ NodePool, FailedCheck, Reason string }
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Pod != "default/db-0" || got.Closest.NodePool != "plugin" || got.Closest.FailedCheck != "taint" {
		t.Errorf("-o json: %v %+v\n%s", err, got, out)
	}

	// Bad input: one clear error, nothing printed.
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "pod", "db-0", "--kubeconfig", missing}, "--kubeconfig " + missing + ": stat"},
		{[]string{"explain", "pod", "db-0", "-n", "default", "--kubeconfig", kubeconfig, "-o", "wide"}, `--output "wide": want table, json or yaml`},
		{[]string{"explain", "pod", "nope", "-n", "default", "--kubeconfig", kubeconfig}, `pod default/nope: pods "nope" not found`},
		{[]string{"explain", "pod", "db-0", "-n", "default", "--kubeconfig", kubeconfig, "--cloud-provider", "gcp"}, `--cloud-provider "gcp": want sim or aws`},
		{[]string{"explain", "nodeclaim", "nope", "--kubeconfig", kubeconfig}, `nodeclaim nope: nodeclaims.karpenter.sh "nope" not found`},
		{[]string{"explain", "node", "nope", "--kubeconfig", kubeconfig}, `node nope: no NodeClaim names it`},
		{[]string{"explain", "nodepool", "nope", "--kubeconfig", kubeconfig}, `nodepool nope: nodepools.karpenter.sh "nope" not found`},
	} {
		out, _, err := run(tc.args...)
		if err == nil || out != "" {
			t.Errorf("%v: printed %q, error %v; want an error and nothing printed", tc.args, out, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %q, want it to name %q", tc.args, err, tc.want)
		}
	}

	out, _, err = run("explain", "nodepool", "plugin", "--kubeconfig", kubeconfig)
	if err != nil || !strings.HasPrefix(out, "NodePool plugin: 0 node(s), 0.0000 $/h.\nNo limits.\n") || !strings.Contains(out, "1 instance type(s) admitted; cheapest: m5.large ") {
		t.Errorf("explain nodepool: %v\n%s", err, out)
	}

	help, _, err := run("explain", "pod", "--help")
	if err != nil || !strings.Contains(help, "kubectl capstan explain pod web-7d4b9-x2x9z") {
		t.Errorf("explain pod --help: %v\n%s", err, help)
	}
}

// record saves the cluster to a file; simulate and explain read it with --recording and answer
// as on the cluster: the pending pod gets a machine. Bad input is one error, nothing written.
func TestRecordThenSimulate(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cls := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "recorded"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large", "m5.xlarge"}}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "recorded"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "recorded"}
	np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(0)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "default"}, Spec: corev1.PodSpec{
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1500m")}}}}}}
	for _, o := range []client.Object{cls, np, pod} {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}

	file := filepath.Join(dir, "cluster.json")
	if out, _, err := run("record", "--kubeconfig", kubeconfig, "-o", file); err != nil || out != "" {
		t.Fatalf("record: %v, printed %q", err, out)
	}
	out, _, err := run("simulate", "--recording", file, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var a struct {
		Now     struct{ Pending int }
		Settled struct {
			Pending  int
			Launched []string
		}
	}
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if a.Now.Pending == 0 || a.Settled.Pending != 0 || len(a.Settled.Launched) != 1 || !strings.HasPrefix(a.Settled.Launched[0], "m5.large (") {
		t.Errorf("simulate: now %d pending; settled %d pending, launched %v; want the pod on a new m5.large", a.Now.Pending, a.Settled.Pending, a.Settled.Launched)
	}
	out, _, err = run("explain", "pod", "web-0", "--recording", file)
	if err != nil || !strings.Contains(out, "m5.large") {
		t.Errorf("explain pod on the recording: %v\n%s", err, out)
	}
	table, _, err := run("simulate", "--recording", file, "--policy", "Balanced")
	if err != nil || !strings.Contains(table, "SETTLED WITH THE CHANGES") || !strings.Contains(table, "launched: m5.large (") {
		t.Errorf("simulate --policy Balanced: %v\n%s", err, table)
	}

	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"apiVersion": "capstan.dev/v9", "kind": "ClusterRecording"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"record", "--kubeconfig", missing, "-o", filepath.Join(dir, "never.json")}, "--kubeconfig " + missing + ": stat"},
		{[]string{"simulate", "--recording", bad}, `apiVersion "capstan.dev/v9"`},
		{[]string{"simulate", "--recording", missing}, "--recording: open " + missing},
		{[]string{"simulate", "--recording", file, "--policy", "Sometimes"}, `--policy "Sometimes": want WhenEmpty`},
		{[]string{"simulate", "--recording", file, "--remove-nodepool", "nope"}, "--remove-nodepool nope: no NodePool of that name"},
		{[]string{"simulate", "--recording", file, "--feature-gates", "Drift=true"}, `--feature-gates "Drift=true"`},
		{[]string{"simulate", "--recording", file, "-f", missing}, "-f: open " + missing},
	} {
		out, _, err := run(tc.args...)
		if err == nil || out != "" {
			t.Errorf("%v: printed %q, error %v; want an error and nothing printed", tc.args, out, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %q, want it to name %q", tc.args, err, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "never.json")); !os.IsNotExist(err) {
		t.Errorf("a failed record left a file: %v", err)
	}
}

// replay writes one HTML page whose summary table holds the simulation's own totals, per
// configuration; bad input is one error and no file.
// shortTrace writes a two-hour trace with a spot interruption into dir and returns its path.
func shortTrace(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "trace.yaml")
	if err := os.WriteFile(path, []byte(`apiVersion: capstan.dev/v1alpha1
kind: Trace
metadata: {name: short}
spec:
  duration: 2h
  step: 1m
  workloads:
    - name: web
      cpu: 500m
      memory: 1Gi
      steps: [{at: 0s, count: 50}, {at: 30m, count: 200}, {at: 1h, count: 40}]
  interruptions: [{at: 45m, fraction: 0.5}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestReplayWritesTheReport(t *testing.T) {
	dir := t.TempDir()
	tracePath := shortTrace(t, dir)
	configs := []string{"../../examples/replay/whenemptyorunderutilized.yaml", "../../examples/replay/balanced.yaml"}
	out := filepath.Join(dir, "report.html")
	if printed, _, err := run("replay", "--trace", tracePath, "--config", configs[0], "--config", configs[1], "-o", out); err != nil || printed != "" {
		t.Fatalf("replay: %v, printed %q", err, printed)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := trace.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []report.Config
	for _, c := range configs {
		cfg, err := replayConfig(t.Context(), c)
		if err != nil {
			t.Fatal(err)
		}
		cfg.PodDeletionCost = true
		cfgs = append(cfgs, cfg)
	}
	runs, err := report.Play(tr, cfgs)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile(`<tr data-config="([^"]+)"><td>[^<]*</td><td class="cost">([0-9.]+)</td><td class="evictions">(\d+)</td><td class="moved-twice">(\d+)</td><td class="interrupted">(\d+)</td><td class="pending">(\d+)</td><td class="peak-nodes">(\d+)</td><td class="launched">(\d+)</td></tr>`)
	rows := row.FindAllStringSubmatch(string(page), -1)
	if len(rows) != len(runs) {
		t.Fatalf("%d summary rows, want %d", len(rows), len(runs))
	}
	for i, r := range runs {
		want := []string{r.Name, fmt.Sprintf("%.2f", r.Totals.CostHours), fmt.Sprint(r.Totals.Evictions), fmt.Sprint(r.Totals.MovedTwice),
			fmt.Sprint(r.Totals.Interrupted), fmt.Sprintf("%.0f", r.Totals.PendingPodSeconds), fmt.Sprint(r.Totals.PeakNodes), fmt.Sprint(r.Totals.Launched)}
		if !slices.Equal(rows[i][1:], want) {
			t.Errorf("summary row %v, want the simulation's totals %v", rows[i][1:], want)
		}
		if r.Totals.Interrupted == 0 || r.Totals.CostHours <= 0 {
			t.Errorf("%s: totals %+v; the trace interrupts spot machines and costs money", r.Name, r.Totals)
		}
	}
	if n := strings.Count(string(page), "<svg"); n != 5 {
		t.Errorf("%d plots, want 5", n)
	}
	if strings.Contains(string(page), "http://") && !strings.Contains(string(page), "http://www.w3.org/") {
		t.Error("the page refers to the network")
	}

	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("apiVersion: capstan.dev/v1alpha1\nkind: Trace\nspec: {duration: 1h, workload: []}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	never := filepath.Join(dir, "never.html")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"replay", "--trace", bad, "--config", configs[0], "-o", never}, `unknown field "workload"`},
		{[]string{"replay", "--config", configs[0], "-o", never}, "--trace and at least one --config are needed"},
		{[]string{"replay", "--trace", tracePath, "--config", tracePath, "-o", never}, `is a "Trace": want a NodePool`},
	} {
		printed, _, err := run(tc.args...)
		if err == nil || printed != "" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, printed %q; want an error naming %q", tc.args, err, printed, tc.want)
		}
	}
	if _, err := os.Stat(never); !os.IsNotExist(err) {
		t.Errorf("a failed replay left a file: %v", err)
	}
}
