// Command kubectl-capstan is Capstan's kubectl plugin. `kubectl capstan explain pod NAME` says
// where a pod runs, or why it is pending — per NodePool the check it failed, the NodePool it came
// closest with and what would make it fit; `explain nodeclaim NAME` (or `node NAME`) what a
// disruption round would do with a machine now, or which rule keeps it. The answers come from the
// code that decides (planning, the solver, the disruption core), run on what the cluster holds
// now. It reads the cluster with the user's own
// credentials and writes nothing. Install: go install capstan.dev/capstan/cmd/kubectl-capstan.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/explain"
	"capstan.dev/capstan/internal/overlay"
	"capstan.dev/capstan/internal/planning"
	"capstan.dev/capstan/internal/record"
	"capstan.dev/capstan/internal/scheme"
)

// gcPercent is the plugin's GOGC unless the environment sets one: simulate and replay are batch
// computations over small heaps (a replayed day of 1,000 pods peaks near 100 MB), where the
// default collects so often that it takes a fifth of the run (docs/replay.md, Speed).
const gcPercent = 400

// version is the plugin's version, set by the release build (make release).
var version = "dev"

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if err := newRoot(os.Stdout, os.Stderr).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// options are the flags every command shares.
type options struct {
	// kube holds kubectl's connection flags (clientcmd.BindOverrideFlags).
	kube      clientcmd.ConfigOverrides
	kubeconf  string
	output    string
	cloud     string
	nodeCost  float64
	spending  float64
	awsRegion string
	awsURL    string
	cluster   string
	// recording, when set, is read instead of the cluster; recordedAt is its time.
	recording  string
	recordedAt time.Time
}

// settings are Capstan's settings the flags repeat, as planning reads them.
func (o *options) settings() planning.Settings {
	return planning.Settings{NodeCost: o.nodeCost, SpendingLimit: o.spending}
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	o := &options{}
	root := &cobra.Command{
		Use:   "kubectl-capstan",
		Short: "Explain Capstan's decisions, and simulate what it would do",
		Long: `kubectl capstan explains Capstan's decisions from the code that makes them, on what the
cluster holds now (or a recording of it), and simulates what Capstan would do next, as configured
and with changes. It reads the cluster with your credentials and writes nothing to it.`,
		Example: `  kubectl capstan explain pod web-7d4b9c-x2x8q          # why it is pending, or why on its node
  kubectl capstan explain nodeclaim default-abc12        # why launched; what disruption would do now
  kubectl capstan explain nodepool default -o yaml       # limits left, budgets, types and prices
  kubectl capstan simulate --policy Balanced             # the fleet, $/h and evictions, before and after
  kubectl capstan record --anonymize -o cluster.json     # a file every command reads with --recording
  kubectl capstan replay --trace examples/traces/diurnal.yaml \
    --config examples/replay/balanced.yaml -o report.html   # a workload trace, into an HTML report`,
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		// kubectl's plugin convention: usage lines read "kubectl capstan …".
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl capstan"},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	f := root.PersistentFlags()
	f.StringVar(&o.kubeconf, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	// kubectl's own connection flags (--context, -n/--namespace, --as, --as-group, --token,
	// --server, --cluster, --user, --request-timeout, --insecure-skip-tls-verify …), as client-go
	// binds them for kubectl. --cluster is the kubeconfig's cluster entry; --cluster-name below is
	// Capstan's CLUSTER_NAME.
	clientcmd.BindOverrideFlags(&o.kube, f, clientcmd.RecommendedConfigOverrideFlags(""))
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&o.cloud, "cloud-provider", "", "sim or aws (default: from the NodePools' node classes)")
	f.Float64Var(&o.nodeCost, "node-cost", 0, "Capstan's NODE_COST setting ($/h per node), if set")
	f.Float64Var(&o.spending, "spending-limit", 0, "Capstan's SPENDING_LIMIT setting ($/h for the cluster), if set")
	f.StringVar(&o.awsRegion, "aws-region", "", "AWS region (aws; default: the SDK's)")
	f.StringVar(&o.awsURL, "aws-endpoint-url", "", "AWS endpoint URL (aws; local endpoints)")
	f.StringVar(&o.cluster, "cluster-name", "", "the cluster's name as Capstan's CLUSTER_NAME (aws; not --cluster, the kubeconfig's entry)")
	f.StringVar(&o.recording, "recording", "", "read this recording (kubectl capstan record) instead of the cluster")

	explainCmd := &cobra.Command{Use: "explain", Short: "Say why Capstan decided what it did"}
	explainCmd.AddCommand(&cobra.Command{
		Use:   "pod NAME",
		Short: "Where a pod runs, or why it is pending and what would make it fit",
		Example: `  kubectl capstan explain pod web-7d4b9-x2x9z
  kubectl capstan explain pod -n batch trainer-0 -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.explainPod(cmd.Context(), args[0], cmd.OutOrStdout())
		},
	})
	explainCmd.AddCommand(&cobra.Command{
		Use:   "nodeclaim NAME",
		Short: "What disruption would do with a NodeClaim now, or what keeps it",
		Example: `  kubectl capstan explain nodeclaim default-x7k2p
  kubectl capstan explain nodeclaim default-x7k2p -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.explainNodeClaim(cmd.Context(), args[0], "", cmd.OutOrStdout())
		},
	})
	explainCmd.AddCommand(&cobra.Command{
		Use:     "node NAME",
		Short:   "explain nodeclaim, for the NodeClaim of a node",
		Example: `  kubectl capstan explain node ip-10-0-1-23.ec2.internal`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.explainNodeClaim(cmd.Context(), "", args[0], cmd.OutOrStdout())
		},
	})
	explainCmd.AddCommand(&cobra.Command{
		Use:     "nodepool NAME",
		Short:   "A NodePool's nodes and $/h, limits left, disruptions its budgets allow now, cheapest types",
		Example: `  kubectl capstan explain nodepool default`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, cloud, err := o.connect(cmd.Context())
			if err != nil {
				return err
			}
			a, err := explain.NodePool(cmd.Context(), c, cloud, o.settings(), o.now(), args[0])
			if err != nil {
				return err
			}
			return write(cmd.OutOrStdout(), o.output, a)
		},
	})
	root.AddCommand(explainCmd, newRecord(o), newSimulate(o), newReplay(o))
	return root
}

// now is the time decisions are made at: the recording's, or the clock's.
func (o *options) now() time.Time {
	if !o.recordedAt.IsZero() {
		return o.recordedAt
	}
	return time.Now()
}

// explainNodeClaim explains the claim named, or the claim of the node named.
func (o *options) explainNodeClaim(ctx context.Context, claim, node string, w io.Writer) error {
	c, _, cloud, err := o.connect(ctx)
	if err != nil {
		return err
	}
	if node != "" {
		ncs := &karpv1.NodeClaimList{}
		if err := c.List(ctx, ncs); err != nil {
			return fmt.Errorf("listing nodeclaims: %w", err)
		}
		for _, nc := range ncs.Items {
			if nc.Status.NodeName == node {
				claim = nc.Name
			}
		}
		if claim == "" {
			return fmt.Errorf("node %s: no NodeClaim names it (a node Capstan did not launch, or not registered yet)", node)
		}
	}
	a, err := explain.NodeClaim(ctx, c, cloud, o.settings(), o.now(), claim)
	if err != nil {
		return err
	}
	return write(w, o.output, a)
}

// connect checks the output format and returns the cluster's client, the namespace to use and
// the cloud provider, as every command needs them.
func (o *options) connect(ctx context.Context) (client.Reader, string, cloudprovider.CloudProvider, error) {
	if o.output != "table" && o.output != "json" && o.output != "yaml" {
		return nil, "", nil, fmt.Errorf("--output %q: want table, json or yaml", o.output)
	}
	var c client.Reader
	var ns string
	var cloud cloudprovider.CloudProvider
	if o.recording != "" {
		var err error
		if c, ns, cloud, err = o.fromRecording(); err != nil {
			return nil, "", nil, err
		}
	} else {
		cc, cns, err := o.client()
		if err != nil {
			return nil, "", nil, err
		}
		if cloud, err = o.provider(ctx, cc); err != nil {
			return nil, "", nil, err
		}
		c, ns = cc, cns
	}
	// Prices and capacity as Capstan's decisions read them: with the NodeOverlays it applies.
	cloud, err := overlay.Local(ctx, c, cloud)
	if err != nil {
		return nil, "", nil, err
	}
	return c, ns, cloud, nil
}

// fromRecording serves --recording as the cluster and its cloud provider.
func (o *options) fromRecording() (client.Reader, string, cloudprovider.CloudProvider, error) {
	f, err := os.Open(o.recording)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--recording: %w", err)
	}
	defer f.Close()
	r, err := record.Read(f)
	if err != nil {
		return nil, "", nil, fmt.Errorf("--recording %s: %w", o.recording, err)
	}
	s, err := scheme.New()
	if err != nil {
		return nil, "", nil, err
	}
	cloud, err := r.Cloud()
	if err != nil {
		return nil, "", nil, fmt.Errorf("--recording %s: %w", o.recording, err)
	}
	o.recordedAt = r.RecordedAt.Time
	ns := o.kube.Context.Namespace
	if ns == "" {
		ns = "default"
	}
	return r.Reader(s), ns, cloud, nil
}

// client reads the cluster as the kubeconfig says, and the namespace to use.
func (o *options) client() (client.Client, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.kubeconf != "" {
		if _, err := os.Stat(o.kubeconf); err != nil {
			return nil, "", fmt.Errorf("--kubeconfig %s: %w", o.kubeconf, err)
		}
		rules.ExplicitPath = o.kubeconf
	}
	if t := o.kube.Timeout; t != "" {
		// As client-go reads it: whole seconds, or a duration with its unit.
		if _, errSec := strconv.Atoi(t); errSec != nil {
			if _, err := time.ParseDuration(t); err != nil {
				return nil, "", fmt.Errorf("--request-timeout %q: want seconds or a duration such as 30s, 2m", t)
			}
		}
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &o.kube)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig: %w", err)
	}
	// -n, else the context's namespace.
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, "", fmt.Errorf("reading the kubeconfig's namespace: %w", err)
	}
	s, err := scheme.New()
	if err != nil {
		return nil, "", err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, "", fmt.Errorf("connecting to the cluster: %w", err)
	}
	return c, ns, nil
}

// provider is the cloud provider Capstan runs with, read-only: named, or inferred from the
// NodePools' node classes.
func (o *options) provider(ctx context.Context, c client.Client) (cloudprovider.CloudProvider, error) {
	kind := o.cloud
	if kind == "" {
		nps := &karpv1.NodePoolList{}
		if err := c.List(ctx, nps); err != nil {
			return nil, fmt.Errorf("listing nodepools: %w", err)
		}
		for _, np := range nps.Items {
			if ref := np.Spec.Template.Spec.NodeClassRef; ref != nil {
				switch ref.Kind {
				case "EC2NodeClass":
					kind = aws.Name
				case "SimNodeClass":
					if kind == "" {
						kind = sim.Name
					}
				}
			}
		}
	}
	clk := clock.RealClock{}
	unavail := unavailable.New(clk, unavailable.DefaultTTL)
	switch kind {
	case sim.Name, "":
		// Offerings come from the SimNodeClasses and the catalog; no machine is launched.
		return sim.NewProvider(c, sim.NewCloudWithStore(clk, nil), clk, unavail)
	case aws.Name:
		if o.cluster == "" {
			return nil, errors.New("--cluster-name is needed with the aws cloud provider")
		}
		clients, err := aws.NewClients(ctx, aws.ClientOptions{Region: o.awsRegion, EndpointURL: o.awsURL})
		if err != nil {
			return nil, err
		}
		return aws.NewProvider(c, clients, clk, unavail, aws.Options{ClusterName: o.cluster}), nil
	}
	return nil, fmt.Errorf("--cloud-provider %q: want %s or %s", kind, sim.Name, aws.Name)
}

func (o *options) explainPod(ctx context.Context, name string, w io.Writer) error {
	c, ns, cloud, err := o.connect(ctx)
	if err != nil {
		return err
	}
	pod := &corev1.Pod{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pod); err != nil {
		return fmt.Errorf("pod %s/%s: %w", ns, name, err)
	}
	a, err := explain.Pod(ctx, c, cloud, o.settings(), pod, time.Now())
	if err != nil {
		return err
	}
	return write(w, o.output, a)
}

// write prints v as the output format says: table (its WriteText), json or yaml.
func write(w io.Writer, output string, v interface{ WriteText(io.Writer) error }) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(w, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return v.WriteText(w)
}
