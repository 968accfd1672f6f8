package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/clock"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/record"
	"capstan.dev/capstan/internal/report"
	"capstan.dev/capstan/internal/trace"
	"capstan.dev/capstan/internal/whatif"
)

func newRecord(o *options) *cobra.Command {
	var out string
	var anonymize bool
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Save what Capstan's decisions read from the cluster into one file",
		Long: `record saves what Capstan's decisions read — NodePools and the offerings their node classes
resolve to, NodeClaims, Nodes, pods' scheduling fields, PodDisruptionBudgets, DaemonSets, pods'
owners and namespaces' labels — into one JSON file that explain and simulate read with
--recording. Container images, commands, environment and volumes other than claims are not kept;
--anonymize also replaces every name by a salted hash (labels, selectors and NodePool names stay).`,
		Example: `  kubectl capstan record -o cluster.json
  kubectl capstan record --anonymize -o shared.json
  kubectl capstan simulate --recording cluster.json --policy Balanced`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.recording != "" {
				return fmt.Errorf("--recording: record reads the cluster, not a recording")
			}
			c, _, err := o.client()
			if err != nil {
				return err
			}
			cloud, err := o.provider(cmd.Context(), c)
			if err != nil {
				return err
			}
			r, err := record.Record(cmd.Context(), c, cloud, record.Options{Now: o.now(), Anonymize: anonymize})
			if err != nil {
				return err
			}
			if out == "" || out == "-" {
				return r.Write(cmd.OutOrStdout())
			}
			return writeFile(out, r.Write)
		},
	}
	// Its own -o: the file, as kubectl capstan record -o FILE reads; a recording is JSON.
	cmd.Flags().StringVarP(&out, "output", "o", "", "the file to write (default: standard output)")
	cmd.Flags().BoolVar(&anonymize, "anonymize", false, "replace names by salted hashes")
	return cmd
}

// writeFile writes through a temporary file renamed at the end: a failure leaves nothing behind.
func writeFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".capstan-record-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

func newSimulate(o *options) *cobra.Command {
	var policy, gates string
	var files, remove, scales []string
	cmd := &cobra.Command{
		Use:   "simulate",
		Short: "Play the cluster forward as Capstan would, as configured and with changes",
		Long: `simulate reads the cluster (or --recording) as Capstan's disruption controller does and plays it
forward on a simulated clock — pending pods placed or machines launched by the solver, disruption
rounds decided, validated and carried out by the decision core — until nothing happens for ten
minutes (or two hours pass): once as configured, and once with the changes given. It prints the
nodes, $/h, pods pending and evicted, and the machines removed and launched. Nothing is written
to the cluster.`,
		Example: `  kubectl capstan simulate
  kubectl capstan simulate --policy Balanced
  kubectl capstan simulate --recording cluster.json -f nodepool-spot.yaml --remove-nodepool on-demand
  kubectl capstan simulate --feature-gates SpotToSpotConsolidation=true -o json
  kubectl capstan simulate -n shop --scale deployment/web=40`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ch, err := changes(policy, files, remove, gates)
			if err != nil {
				return err
			}
			c, ns, cloud, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			if ch.Scale, err = scaleFlags(scales, ns); err != nil {
				return err
			}
			a, err := whatif.Simulate(cmd.Context(), c, cloud, ch, whatif.Options{Now: o.now(), Settings: o.settings(),
				Decision: disruptionplan.Options{}})
			if err != nil {
				return err
			}
			return write(cmd.OutOrStdout(), o.output, a)
		},
	}
	f := cmd.Flags()
	f.StringVar(&policy, "policy", "", "try every NodePool with this consolidationPolicy (WhenEmpty, WhenEmptyOrUnderutilized, Balanced)")
	f.StringArrayVarP(&files, "filename", "f", nil, "try these NodePool manifests (each replaces the NodePool of its name, or is added)")
	f.StringArrayVar(&remove, "remove-nodepool", nil, "try without this NodePool (its machines stay as other nodes)")
	f.StringVar(&gates, "feature-gates", "", "try with these gates: SpotToSpotConsolidation=true|false")
	f.StringArrayVar(&scales, "scale", nil, "try with a Deployment scaled: deployment/NAME=REPLICAS (in -n's namespace)")
	return cmd
}

// scaleFlags reads --scale deployment/NAME=N values.
func scaleFlags(values []string, ns string) ([]whatif.Scale, error) {
	var out []whatif.Scale
	for _, v := range values {
		target, count, ok := strings.Cut(v, "=")
		kind, name, named := strings.Cut(target, "/")
		n, err := strconv.Atoi(count)
		if !ok || !named || name == "" || (kind != "deployment" && kind != "deployments" && kind != "deploy") || err != nil || n < 0 {
			return nil, fmt.Errorf("--scale %q: want deployment/NAME=REPLICAS", v)
		}
		out = append(out, whatif.Scale{Namespace: ns, Deployment: name, Replicas: n})
	}
	return out, nil
}

// changes reads the flags of simulate; an error names the flag and the value.
func changes(policy string, files, remove []string, gates string) (whatif.Changes, error) {
	var ch whatif.Changes
	switch karpv1.ConsolidationPolicy(policy) {
	case "":
	case karpv1.ConsolidationPolicyWhenEmpty, karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized, karpv1.ConsolidationPolicyBalanced:
		ch.Policy = karpv1.ConsolidationPolicy(policy)
	default:
		return ch, fmt.Errorf("--policy %q: want WhenEmpty, WhenEmptyOrUnderutilized or Balanced", policy)
	}
	for _, path := range files {
		b, err := os.ReadFile(path)
		if err != nil {
			return ch, fmt.Errorf("-f: %w", err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for i := 0; ; i++ {
			np := &karpv1.NodePool{}
			if err := dec.Decode(np); err == io.EOF {
				break
			} else if err != nil {
				return ch, fmt.Errorf("-f %s: document %d: %w", path, i+1, err)
			}
			if np.Kind == "" && np.Name == "" {
				continue
			}
			if np.Kind != "NodePool" || np.APIVersion != karpv1.SchemeGroupVersion.String() {
				return ch, fmt.Errorf("-f %s: document %d is %s %s, want a %s NodePool", path, i+1, np.APIVersion, np.Kind, karpv1.SchemeGroupVersion)
			}
			if np.Name == "" {
				return ch, fmt.Errorf("-f %s: document %d: metadata.name is empty", path, i+1)
			}
			ch.NodePools = append(ch.NodePools, np)
		}
	}
	ch.RemoveNodePools = remove
	for _, kv := range strings.Split(gates, ",") {
		if kv == "" {
			continue
		}
		name, value, _ := strings.Cut(kv, "=")
		on, err := strconv.ParseBool(value)
		if name != "SpotToSpotConsolidation" || err != nil {
			return ch, fmt.Errorf("--feature-gates %q: simulate tries SpotToSpotConsolidation=true|false only", kv)
		}
		ch.SpotToSpotConsolidation = &on
	}
	return ch, nil
}

func newReplay(o *options) *cobra.Command {
	var traceFile, out, gates string
	var configs []string
	var deletionCost bool
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "Play a workload trace through Capstan under several configurations, into an HTML report",
		Long: `replay plays a workload trace (Deployments scaling as it says, spot interruptions; see
docs/replay.md) through Capstan's solver and disruption decision core on a simulated clock, once
per --config (a file with a NodePool and, optionally, the SimNodeClass whose instance types it
uses; the simulated cloud's default catalog otherwise), and writes one self-contained HTML page:
nodes, $/h, cumulative cost, pending pods and evictions over time, one line per configuration,
and a table of totals. It needs no cluster.`,
		Example: `  kubectl capstan replay --trace examples/traces/diurnal.yaml \
    --config examples/replay/whenemptyorunderutilized.yaml --config examples/replay/balanced.yaml -o report.html`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if traceFile == "" || len(configs) == 0 {
				return fmt.Errorf("--trace and at least one --config are needed")
			}
			f, err := os.Open(traceFile)
			if err != nil {
				return fmt.Errorf("--trace: %w", err)
			}
			defer f.Close()
			t, err := trace.Read(f)
			if err != nil {
				return fmt.Errorf("--trace %s: %w", traceFile, err)
			}
			ch, err := changes("", nil, nil, gates)
			if err != nil {
				return err
			}
			var cfgs []report.Config
			for _, path := range configs {
				cfg, err := replayConfig(cmd.Context(), path)
				if err != nil {
					return fmt.Errorf("--config %s: %w", path, err)
				}
				if ch.SpotToSpotConsolidation != nil {
					cfg.Decision.SpotToSpotConsolidation = *ch.SpotToSpotConsolidation
				}
				cfg.PodDeletionCost = deletionCost
				cfgs = append(cfgs, cfg)
			}
			runs, err := report.Play(t, cfgs)
			if err != nil {
				return err
			}
			title := "Replay of " + cmp.Or(t.Metadata.Name, filepath.Base(traceFile))
			desc := fmt.Sprintf("%s of simulated time in steps of %s, %d configuration(s).", t.Spec.Duration.Duration, t.StepOrDefault(), len(cfgs))
			write := func(w io.Writer) error { return report.WriteHTML(w, title, desc, runs) }
			if out == "" || out == "-" {
				return write(cmd.OutOrStdout())
			}
			return writeFile(out, write)
		},
	}
	f := cmd.Flags()
	f.StringVar(&traceFile, "trace", "", "the trace to play (docs/replay.md)")
	f.StringArrayVar(&configs, "config", nil, "a configuration: a file with a NodePool (and optionally its SimNodeClass); repeat to compare")
	// Its own -o: the report file.
	f.StringVarP(&out, "output", "o", "", "the HTML file to write (default: standard output)")
	f.StringVar(&gates, "feature-gates", "", "SpotToSpotConsolidation=true|false for every configuration")
	f.BoolVar(&deletionCost, "pod-deletion-cost", true, "rank pods for scale-ins as PodDeletionCostManagement does (Capstan's default)")
	return cmd
}

// replayConfig reads a configuration file: one NodePool, and optionally the SimNodeClass whose
// instance types it uses (the simulated cloud's default catalog otherwise).
func replayConfig(ctx context.Context, path string) (report.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return report.Config{}, err
	}
	var np *karpv1.NodePool
	class := &simv1alpha1.SimNodeClass{}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for i := 1; ; i++ {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err == io.EOF {
			break
		} else if err != nil {
			return report.Config{}, fmt.Errorf("document %d: %w", i, err)
		}
		if len(raw.Raw) == 0 {
			continue
		}
		var head metav1.TypeMeta
		if err := json.Unmarshal(raw.Raw, &head); err != nil {
			return report.Config{}, fmt.Errorf("document %d: %w", i, err)
		}
		switch head.Kind {
		case "NodePool":
			if np != nil {
				return report.Config{}, fmt.Errorf("document %d: a configuration holds one NodePool", i)
			}
			np = &karpv1.NodePool{}
			if err := strictJSON(raw.Raw, np); err != nil {
				return report.Config{}, fmt.Errorf("document %d (NodePool): %w", i, err)
			}
		case "SimNodeClass":
			if err := strictJSON(raw.Raw, class); err != nil {
				return report.Config{}, fmt.Errorf("document %d (SimNodeClass): %w", i, err)
			}
		default:
			return report.Config{}, fmt.Errorf("document %d is a %q: want a NodePool and optionally a SimNodeClass", i, head.Kind)
		}
	}
	if np == nil {
		return report.Config{}, fmt.Errorf("no NodePool")
	}
	clk := clock.RealClock{}
	p, err := sim.NewProvider(nil, sim.NewCloudWithStore(clk, nil), clk, nil)
	if err != nil {
		return report.Config{}, err
	}
	its, err := p.InstanceTypes(ctx, class)
	if err != nil {
		return report.Config{}, fmt.Errorf("instance types: %w", err)
	}
	return report.Config{Name: cmp.Or(np.Name, strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))), NodePool: np, InstanceTypes: its}, nil
}

// strictJSON decodes, refusing unknown fields.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
