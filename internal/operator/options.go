// Package operator assembles Capstan: options from flags and the environment, the JSON logger, the
// controller-runtime manager with leader election, health checks and metrics, the cloud provider
// and every controller. cmd/capstan runs it; end-to-end tests start it in-process.
package operator

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	cliflag "k8s.io/component-base/cli/flag"

	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/nodepools"
)

// Options configure Capstan. Each setting is a flag and an environment variable with Karpenter's
// names where Karpenter has the setting (METRICS_PORT, BATCH_IDLE_DURATION, FEATURE_GATES …), so a
// deployment written for Karpenter configures Capstan unchanged; a flag given on the command line
// wins over the variable.
type Options struct {
	ClusterName       string
	CloudProvider     string
	BatchIdleDuration time.Duration
	BatchMaxDuration  time.Duration
	// MetricsPort and HealthProbePort are Karpenter's; MetricsBindAddress and
	// HealthProbeBindAddress, when set, replace them with a full address ("127.0.0.1:0", "0"
	// disables metrics).
	MetricsPort             int
	HealthProbePort         int
	MetricsBindAddress      string
	HealthProbeBindAddress  string
	KubeClientQPS           int
	KubeClientBurst         int
	EnableProfiling         bool
	DisableLeaderElection   bool
	LeaderElectionName      string
	LeaderElectionNamespace string
	MemoryLimit             int64
	// NodeCost is what every machine costs per hour beyond its instance price, in US dollars,
	// for NodePools without the capstan.dev/node-cost annotation.
	NodeCost float64
	// SpendingLimit is the cluster's spending limit in dollars per hour across every NodePool
	// (0: none).
	SpendingLimit       float64
	LogLevel            string
	LogOutputPaths      []string
	LogErrorOutputPaths []string
	PreferencePolicy    string
	// SchedulerConfig mirrors the kube-scheduler's default topology spread constraints (nil:
	// none).
	SchedulerConfig *defaultspread.Config
	MinValuesPolicy string
	FeatureGates    FeatureGates
	SimStateFile    string
	// SimFaults are the API faults the simulated cloud injects (the chaos suite).
	SimFaults  sim.Faults
	Kubeconfig string
	// AWS settings (Karpenter's names).
	AWSRegion         string
	AWSEndpointURL    string
	ClusterEndpoint   string
	ClusterCABundle   string
	InterruptionQueue string
	// ReplaceOnRebalance replaces a Spot machine on its rebalance recommendation.
	ReplaceOnRebalance      bool
	VMMemoryOverheadPercent float64
	// IsolatedVPC, ReservedENIs and EKSControlPlane are Karpenter's AWS settings of those names.
	IsolatedVPC     bool
	ReservedENIs    int
	EKSControlPlane bool
	// AMIRefreshInterval, SubnetRefreshInterval and SecurityGroupRefreshInterval bound how stale
	// an EC2NodeClass's resolved AMIs, subnets and security groups may get (Karpenter's settings):
	// Capstan resolves all three together, at the shortest of them.
	AMIRefreshInterval, SubnetRefreshInterval, SecurityGroupRefreshInterval time.Duration
	// Disruption settings (Capstan's own; Karpenter hard-codes its equivalents).
	DisruptionPollPeriod          time.Duration
	DisruptionValidationPeriod    time.Duration
	DisruptionReplacementTimeout  time.Duration
	MultiNodeConsolidationTimeout time.Duration
	ConsolidationChurnMemory      time.Duration
	// ConsolidationPlanning marks the nodes later consolidation rounds are expected to remove
	// (capstan.dev/consolidation-planned:PreferNoSchedule), so that moved pods go to nodes that stay.
	ConsolidationPlanning bool
	// UnderutilizedConsolidationK is the k of WhenEmptyOrUnderutilized pools: a consolidation
	// there must score (saving against disruption, as Balanced scores) at least 1/k; 0 takes
	// every saving, as Karpenter does.
	UnderutilizedConsolidationK float64
	// CalmAfterScaleDown is how long after an owner shrank a consolidation (WhenEmptyOrUnderutilized
	// or Balanced) evicting its pods must score 4 (disruption.CalmK) instead of 1/k; 0 turns that
	// off.
	CalmAfterScaleDown time.Duration
	// ReplacementSettle is how long after its machine was initialised a NodeClaim a disruption
	// launched is kept from consolidation, waiting for the pods it was bought for; 0 turns that
	// off (consolidateAfter alone applies).
	ReplacementSettle time.Duration
	// Help and Version are set when --help or --version was asked for.
	Help, Version bool
	// BuildVersion and BuildCommit describe the binary, for karpenter_build_info.
	BuildVersion, BuildCommit string
}

// Values of the enumerated settings.
const (
	CloudProviderSim = "sim"
	CloudProviderAWS = "aws"

	PreferencePolicyRespect = "Respect"
	PreferencePolicyIgnore  = "Ignore"
	MinValuesPolicyStrict   = "Strict"
	MinValuesPolicyBest     = "BestEffort"
)

// FeatureGates are Karpenter v1.15's feature gates (FEATURE_GATES, "Name=true,Other=false"), each
// of whose features Capstan has; a gate it does not know is refused, naming it.
type FeatureGates struct {
	NodeRepair                bool
	ReservedCapacity          bool
	SpotToSpotConsolidation   bool
	NodeOverlay               bool
	StaticCapacity            bool
	CapacityBuffer            bool
	TerminateFirstDrift       bool
	TerminateFirstRepair      bool
	PodDeletionCostManagement bool
}

// featureGate is a gate's name, its field and Capstan's default: Karpenter's, except
// PodDeletionCostManagement, on (docs/features.md says why).
type featureGate struct {
	name  string
	field func(*FeatureGates) *bool
	on    bool
}

// featureGates are the gates, in the order FEATURE_GATES' default lists them.
var featureGates = []featureGate{
	{"CapacityBuffer", func(g *FeatureGates) *bool { return &g.CapacityBuffer }, false},
	{"NodeOverlay", func(g *FeatureGates) *bool { return &g.NodeOverlay }, false},
	{"NodeRepair", func(g *FeatureGates) *bool { return &g.NodeRepair }, false},
	{"PodDeletionCostManagement", func(g *FeatureGates) *bool { return &g.PodDeletionCostManagement }, true},
	{"ReservedCapacity", func(g *FeatureGates) *bool { return &g.ReservedCapacity }, true},
	{"SpotToSpotConsolidation", func(g *FeatureGates) *bool { return &g.SpotToSpotConsolidation }, false},
	{"StaticCapacity", func(g *FeatureGates) *bool { return &g.StaticCapacity }, false},
	{"TerminateFirstDrift", func(g *FeatureGates) *bool { return &g.TerminateFirstDrift }, false},
	{"TerminateFirstRepair", func(g *FeatureGates) *bool { return &g.TerminateFirstRepair }, false},
}

func defaultFeatureGates() string {
	parts := make([]string, len(featureGates))
	for i, g := range featureGates {
		parts[i] = fmt.Sprintf("%s=%t", g.name, g.on)
	}
	return strings.Join(parts, ",")
}

// parseFeatureGates reads "Name=true,Other=false" (component-base's map syntax, as Karpenter
// reads it) over the defaults; an unknown gate is an error naming it.
func parseFeatureGates(s string) (FeatureGates, error) {
	var out FeatureGates
	for _, g := range featureGates {
		*g.field(&out) = g.on
	}
	set := map[string]bool{}
	if err := cliflag.NewMapStringBool(&set).Set(s); err != nil {
		return out, fmt.Errorf("%q: %w (want Name=true or Name=false, comma-separated)", s, err)
	}
	for name, on := range set {
		i := slices.IndexFunc(featureGates, func(g featureGate) bool { return g.name == name })
		if i < 0 {
			return out, fmt.Errorf("unknown feature gate %q", name)
		}
		*featureGates[i].field(&out) = on
	}
	return out, nil
}

// AWSFeatureGates are Karpenter v1.15's AWS-specific gates (AWS_FEATURE_GATES); Capstan
// implements none of them.
var AWSFeatureGates = []string{"NodeClassCEL", "DRANVIDIAGPU", "DRAEFA", "RebootForRepair"}

// checkAWSFeatureGates reads "Name=true,Other=false": any gate may be named false (a values file
// written for Karpenter lists them); one named true is refused, since nothing would act on it.
func checkAWSFeatureGates(s string) error {
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return fmt.Errorf("%q: want Name=true or Name=false", part)
		}
		b, err := strconv.ParseBool(val)
		if err != nil {
			return fmt.Errorf("feature gate %s=%q: not a boolean", name, val)
		}
		if b {
			return fmt.Errorf("%s=true: Capstan implements no AWS feature gate (docs/features.md); set it false or leave it out", name)
		}
	}
	return nil
}

// raw holds the settings Parse reads as text and converts afterwards.
type raw struct {
	outPaths, errPaths, gates, awsGates, schedulerConfig, simFaults string
	ignoreDRA                                                       bool
}

// flags registers flags with their environment variables.
type flags struct {
	fs *flag.FlagSet
	// envs maps a flag to its environment variable.
	envs map[string]string
}

func (f flags) str(p *string, name, env, def, usage string) {
	f.envs[name] = env
	f.fs.StringVar(p, name, def, usage)
}

func (f flags) dur(p *time.Duration, name, env string, def time.Duration, usage string) {
	f.envs[name] = env
	f.fs.DurationVar(p, name, def, usage)
}

func (f flags) integer(p *int, name, env string, def int, usage string) {
	f.envs[name] = env
	f.fs.IntVar(p, name, def, usage)
}

func (f flags) boolean(p *bool, name, env string, def bool, usage string) {
	f.envs[name] = env
	f.fs.BoolVar(p, name, def, usage)
}

// define registers every flag on a new set; envs maps a flag to its environment variable.
func define(o *Options, r *raw) (fs *flag.FlagSet, envs map[string]string) {
	f := flags{fs: flag.NewFlagSet("capstan", flag.ContinueOnError), envs: map[string]string{}}
	f.fs.SetOutput(io.Discard)
	defineGeneral(f, o, r)
	defineDisruption(f, o)
	defineAWS(f, o, r)
	f.str(&r.simFaults, "sim-faults", "SIM_FAULTS", "", "fail or hang the simulated cloud's calls: errors=N,hangs=M,seed=S (percentages)")
	f.str(&o.SimStateFile, "sim-state-file", "SIM_STATE_FILE", "", "file the simulated cloud keeps its machines in (default: ConfigMaps)")
	f.fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then in-cluster)")
	f.fs.BoolVar(&o.Version, "version", false, "print the version and exit")
	f.fs.BoolVar(&o.Help, "help", false, "print the flags and their environment variables and exit")
	return f.fs, f.envs
}

// defineGeneral registers the flags of the process, its clients and provisioning.
func defineGeneral(f flags, o *Options, r *raw) {
	f.str(&o.ClusterName, "cluster-name", "CLUSTER_NAME", "capstan-local", "name of the cluster, used to tag and find its machines")
	f.str(&o.CloudProvider, "cloud-provider", "CLOUD_PROVIDER", CloudProviderSim, "cloud provider: sim or aws")
	f.fs.StringVar(&o.CloudProvider, "cloud", CloudProviderSim, "short for --cloud-provider")
	f.dur(&o.BatchIdleDuration, "batch-idle-duration", "BATCH_IDLE_DURATION", time.Second, "a batch of pending pods ends when none arrived for this long")
	f.dur(&o.BatchMaxDuration, "batch-max-duration", "BATCH_MAX_DURATION", 10*time.Second, "the longest a batch of pending pods waits")
	f.integer(&o.MetricsPort, "metrics-port", "METRICS_PORT", 8080, "port of the Prometheus /metrics endpoint")
	f.integer(&o.HealthProbePort, "health-probe-port", "HEALTH_PROBE_PORT", 8081, "port of /healthz and /readyz")
	f.str(&o.MetricsBindAddress, "metrics-bind-address", "METRICS_BIND_ADDRESS", "", "full address of /metrics, replacing --metrics-port (\"0\" disables)")
	f.str(&o.HealthProbeBindAddress, "health-probe-bind-address", "HEALTH_PROBE_BIND_ADDRESS", "", "full address of the health probes, replacing --health-probe-port")
	f.integer(&o.KubeClientQPS, "kube-client-qps", "KUBE_CLIENT_QPS", 200, "smoothed rate of queries to the API server")
	f.integer(&o.KubeClientBurst, "kube-client-burst", "KUBE_CLIENT_BURST", 300, "largest burst of queries to the API server")
	f.boolean(&o.EnableProfiling, "enable-profiling", "ENABLE_PROFILING", false, "serve Go's pprof profiles on the metrics endpoint")
	f.boolean(&o.DisableLeaderElection, "disable-leader-election", "DISABLE_LEADER_ELECTION", false, "act without electing a leader (one replica only)")
	f.str(&o.LeaderElectionName, "leader-election-name", "LEADER_ELECTION_NAME", "capstan-leader-election", "name of the leader-election Lease")
	f.str(&o.LeaderElectionNamespace, "leader-election-namespace", "LEADER_ELECTION_NAMESPACE", "kube-system", "namespace of the leader-election Lease")
	f.envs["memory-limit"] = "MEMORY_LIMIT"
	f.fs.Int64Var(&o.MemoryLimit, "memory-limit", -1, "memory limit of the container in bytes; Go's soft limit is set to 90% of it (-1: none)")
	f.str(&o.LogLevel, "log-level", "LOG_LEVEL", "info", "log level: debug, info or error")
	f.str(&r.outPaths, "log-output-paths", "LOG_OUTPUT_PATHS", "stdout", "comma-separated log destinations (stdout, stderr or files)")
	f.str(&r.errPaths, "log-error-output-paths", "LOG_ERROR_OUTPUT_PATHS", "stderr", "comma-separated destinations of the logger's own errors")
	f.str(&o.PreferencePolicy, "preference-policy", "PREFERENCE_POLICY", PreferencePolicyRespect, "Respect or Ignore pods' preferences (preferred affinity, ScheduleAnyway spreads) when planning")
	f.envs["node-cost"] = "NODE_COST"
	f.fs.Func("node-cost", "what every machine costs per hour beyond its instance price, in US dollars", func(v string) error {
		f, err := nodepools.ParseNodeCost(v)
		if err != nil {
			return errors.New("not a non-negative decimal price in US dollars per hour")
		}
		o.NodeCost = f
		return nil
	})
	f.envs["spending-limit"] = "SPENDING_LIMIT"
	f.fs.Func("spending-limit", "the most every NodePool's machines together may cost per hour, in US dollars (0: no limit)", func(v string) error {
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || f < 0 || f > maxSpendingLimit || math.IsNaN(f) {
			return fmt.Errorf("not a price in US dollars per hour between 0 and %g", maxSpendingLimit)
		}
		o.SpendingLimit = f
		return nil
	})
	f.str(&o.MinValuesPolicy, "min-values-policy", "MIN_VALUES_POLICY", MinValuesPolicyStrict, "Strict: a requirement's minValues must hold; BestEffort: launch with fewer types when not enough fit")
	f.str(&r.gates, "feature-gates", "FEATURE_GATES", defaultFeatureGates(), "Karpenter's feature gates, Name=true|false, comma-separated")
	f.str(&r.schedulerConfig, "scheduler-config", "SCHEDULER_CONFIG", "", "the kube-scheduler's podTopologySpread.defaultConstraints, YAML or JSON")
	f.boolean(&r.ignoreDRA, "ignore-dra-requests", "IGNORE_DRA_REQUESTS", true, "leave pods with DRA resource claims to the kube-scheduler (false is refused)")
}

// defineDisruption registers the flags of disruption.
func defineDisruption(f flags, o *Options) {
	f.dur(&o.DisruptionPollPeriod, "disruption-poll-period", "DISRUPTION_POLL_PERIOD", 10*time.Second, "time between disruption rounds when nothing is in flight")
	f.dur(&o.DisruptionValidationPeriod, "disruption-validation-period", "DISRUPTION_VALIDATION_PERIOD", 15*time.Second, "how long a disruption decision waits before it is checked again against the cluster and carried out")
	f.dur(&o.DisruptionReplacementTimeout, "disruption-replacement-timeout", "DISRUPTION_REPLACEMENT_TIMEOUT", 10*time.Minute, "how long a disruption waits for its replacements to initialize before it rolls back")
	f.dur(&o.MultiNodeConsolidationTimeout, "multi-node-consolidation-timeout", "MULTI_NODE_CONSOLIDATION_TIMEOUT", time.Minute, "bound on the time one round spends searching for a multi-node (and single-node) consolidation")
	f.dur(&o.ConsolidationChurnMemory, "consolidation-churn-memory", "CONSOLIDATION_CHURN_MEMORY", time.Hour, "a pod moved by consolidation is not moved again by consolidation within this time")
	f.envs["consolidation-planning"] = "CONSOLIDATION_PLANNING"
	f.fs.BoolVar(&o.ConsolidationPlanning, "consolidation-planning", true, "mark nodes later consolidation rounds will remove, so moved pods go to nodes that stay")
	f.envs["underutilized-consolidation-k"] = "UNDERUTILIZED_CONSOLIDATION_K"
	f.fs.Float64Var(&o.UnderutilizedConsolidationK, "underutilized-consolidation-k", disruptionplan.DefaultUnderutilizedK, "WhenEmptyOrUnderutilized takes a consolidation scoring at least 1/k; 0: every saving")
	f.dur(&o.ReplacementSettle, "replacement-settle", "REPLACEMENT_SETTLE", disruptionplan.DefaultReplacementSettle, "a disruption's replacement is not consolidated for this long after it initialised")
	f.dur(&o.CalmAfterScaleDown, "calm-after-scale-down", "CALM_AFTER_SCALE_DOWN", disruptionplan.DefaultCalmAfterScaleDown, "after a workload shrank, consolidations evicting its pods need a score of 4 for this long")
}

// defineAWS registers the flags of the AWS provider.
func defineAWS(f flags, o *Options, r *raw) {
	f.str(&o.AWSRegion, "aws-region", "AWS_REGION", "", "AWS region (default: the SDK's chain: AWS_REGION, the shared config, IMDS)")
	f.str(&o.AWSEndpointURL, "aws-endpoint-url", "AWS_ENDPOINT_URL", "", "send every AWS call to this URL (local endpoints, a proxy)")
	f.str(&o.ClusterEndpoint, "cluster-endpoint", "CLUSTER_ENDPOINT", "", "API server URL new nodes join (default on AWS: the cluster's endpoint read with EKS DescribeCluster)")
	f.str(&o.ClusterCABundle, "cluster-ca-bundle", "CLUSTER_CA_BUNDLE", "", "base64 PEM CA bundle new nodes trust for the API server (default: Capstan's own)")
	f.str(&o.InterruptionQueue, "interruption-queue", "INTERRUPTION_QUEUE", "", "SQS queue of EventBridge interruption events to consume (AWS; empty: none)")
	f.envs["replace-on-rebalance-recommendation"] = "REPLACE_ON_REBALANCE_RECOMMENDATION"
	f.fs.BoolVar(&o.ReplaceOnRebalance, "replace-on-rebalance-recommendation", false, "replace a Spot machine on its rebalance recommendation (AWS; needs the queue)")
	f.envs["vm-memory-overhead-percent"] = "VM_MEMORY_OVERHEAD_PERCENT"
	f.fs.Float64Var(&o.VMMemoryOverheadPercent, "vm-memory-overhead-percent", 0.075, "share of an instance type's memory the hypervisor and OS keep (AWS)")
	f.boolean(&o.IsolatedVPC, "isolated-vpc", "ISOLATED_VPC", false, "never call the Pricing API; price on-demand from the embedded catalog (AWS)")
	f.integer(&o.ReservedENIs, "reserved-enis", "RESERVED_ENIS", 0, "network interfaces per machine kept from the VPC CNI's pod count (AWS)")
	f.boolean(&o.EKSControlPlane, "eks-control-plane", "EKS_CONTROL_PLANE", false, "read the cluster's endpoint, CA bundle and service CIDR from EKS DescribeCluster (AWS)")
	f.str(&r.awsGates, "aws-feature-gates", "AWS_FEATURE_GATES", "NodeClassCEL=false", "Karpenter's AWS feature gates, Name=true|false; none may be true")
	f.dur(&o.AMIRefreshInterval, "ami-refresh-interval", "AMI_REFRESH_INTERVAL", time.Minute, "how stale a class's resolved AMIs may get, at least 1m (AWS)")
	f.dur(&o.SubnetRefreshInterval, "subnet-refresh-interval", "SUBNET_REFRESH_INTERVAL", time.Minute, "how stale an EC2NodeClass's resolved subnets may get, at least 1m (AWS)")
	f.dur(&o.SecurityGroupRefreshInterval, "security-group-refresh-interval", "SECURITY_GROUP_REFRESH_INTERVAL", time.Minute, "how stale an EC2NodeClass's resolved security groups may get, at least 1m (AWS)")
}

// Parse reads options from args and the environment. --help and --version are not errors: they
// set Help and Version, and the caller prints Usage or the version.
func Parse(args []string, getenv func(string) string) (Options, error) {
	var o Options
	var r raw
	fs, envs := define(&o, &r)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			o.Help = true
			return o, nil
		}
		return o, err
	}
	if o.Help || o.Version {
		return o, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["cloud"] {
		set["cloud-provider"] = true
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := envs[f.Name]
		if v := getenv(env); env != "" && v != "" && !set[f.Name] {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return o, err
	}
	o.LogOutputPaths, o.LogErrorOutputPaths = splitPaths(r.outPaths), splitPaths(r.errPaths)
	fg, err := parseFeatureGates(r.gates)
	if err != nil {
		return o, fmt.Errorf("--feature-gates (FEATURE_GATES): %w", err)
	}
	if o.SimFaults, err = sim.ParseFaults(r.simFaults); err != nil {
		return o, fmt.Errorf("--sim-faults (SIM_FAULTS): %w", err)
	}
	if err := checkAWSFeatureGates(r.awsGates); err != nil {
		return o, fmt.Errorf("--aws-feature-gates (AWS_FEATURE_GATES): %w", err)
	}
	o.FeatureGates = fg
	if o.SchedulerConfig, err = defaultspread.Parse(r.schedulerConfig); err != nil {
		return o, fmt.Errorf("--scheduler-config (SCHEDULER_CONFIG): %w", err)
	}
	if !r.ignoreDRA {
		// Karpenter's false plans DRA devices (alpha); accepting it and ignoring it would plan
		// nothing for those pods without saying so.
		return o, errors.New("--ignore-dra-requests (IGNORE_DRA_REQUESTS) false: Capstan does not simulate Dynamic Resource Allocation devices; leave it true (Karpenter's default), and pods with resource claims are left to the kube-scheduler")
	}
	return o, o.Validate()
}

func splitPaths(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks the options and names the bad one with its environment variable.
func (o Options) Validate() error {
	var p problems
	if o.CloudProvider != CloudProviderSim && o.CloudProvider != CloudProviderAWS {
		p.bad("cloud-provider", "CLOUD_PROVIDER", o.CloudProvider, "must be sim or aws")
	}
	if o.UnderutilizedConsolidationK < 0 {
		p.bad("underutilized-consolidation-k", "UNDERUTILIZED_CONSOLIDATION_K", o.UnderutilizedConsolidationK, "must not be negative")
	}
	if o.ReplacementSettle < 0 {
		p.bad("replacement-settle", "REPLACEMENT_SETTLE", o.ReplacementSettle, "must not be negative")
	}
	if o.CalmAfterScaleDown < 0 {
		p.bad("calm-after-scale-down", "CALM_AFTER_SCALE_DOWN", o.CalmAfterScaleDown, "must not be negative")
	}
	if !slices.Contains([]string{"debug", "info", "error"}, o.LogLevel) {
		p.bad("log-level", "LOG_LEVEL", o.LogLevel, "must be debug, info or error")
	}
	if o.ClusterName == "" {
		p.bad("cluster-name", "CLUSTER_NAME", o.ClusterName, "must not be empty")
	}
	if o.MetricsPort < 0 || o.MetricsPort > 65535 {
		p.bad("metrics-port", "METRICS_PORT", o.MetricsPort, "must be a port number")
	}
	if o.HealthProbePort < 0 || o.HealthProbePort > 65535 {
		p.bad("health-probe-port", "HEALTH_PROBE_PORT", o.HealthProbePort, "must be a port number")
	}
	if o.KubeClientQPS <= 0 {
		p.bad("kube-client-qps", "KUBE_CLIENT_QPS", o.KubeClientQPS, "must be positive")
	}
	if o.KubeClientBurst <= 0 {
		p.bad("kube-client-burst", "KUBE_CLIENT_BURST", o.KubeClientBurst, "must be positive")
	}
	if o.PreferencePolicy != PreferencePolicyRespect && o.PreferencePolicy != PreferencePolicyIgnore {
		p.bad("preference-policy", "PREFERENCE_POLICY", o.PreferencePolicy, "must be Respect or Ignore")
	}
	if o.MinValuesPolicy != MinValuesPolicyStrict && o.MinValuesPolicy != MinValuesPolicyBest {
		p.bad("min-values-policy", "MIN_VALUES_POLICY", o.MinValuesPolicy, "must be Strict or BestEffort")
	}
	if o.LeaderElectionName == "" {
		p.bad("leader-election-name", "LEADER_ELECTION_NAME", o.LeaderElectionName, "must not be empty")
	}
	if len(o.LogOutputPaths) == 0 {
		p.bad("log-output-paths", "LOG_OUTPUT_PATHS", "", "must name at least one destination")
	}
	o.validateDurations(&p)
	o.validateAWS(&p)
	return errors.Join(p...)
}

// problems are the options Validate refuses.
type problems []error

// bad refuses the value v of a flag, saying what it wants.
func (p *problems) bad(flag, env string, v any, want string) {
	*p = append(*p, fmt.Errorf("--%s (%s) %q: %s", flag, env, fmt.Sprint(v), want))
}

// validateDurations checks the batching and disruption durations.
func (o Options) validateDurations(p *problems) {
	if o.BatchIdleDuration <= 0 {
		p.bad("batch-idle-duration", "BATCH_IDLE_DURATION", o.BatchIdleDuration, "must be positive")
	}
	if o.BatchMaxDuration <= 0 || o.BatchMaxDuration < o.BatchIdleDuration {
		p.bad("batch-max-duration", "BATCH_MAX_DURATION", o.BatchMaxDuration, "must be positive and at least the batch idle duration")
	}
	for _, d := range []struct {
		flag, env string
		v         time.Duration
		zeroOK    bool
	}{
		{"disruption-poll-period", "DISRUPTION_POLL_PERIOD", o.DisruptionPollPeriod, false},
		{"disruption-validation-period", "DISRUPTION_VALIDATION_PERIOD", o.DisruptionValidationPeriod, true},
		{"disruption-replacement-timeout", "DISRUPTION_REPLACEMENT_TIMEOUT", o.DisruptionReplacementTimeout, false},
		{"multi-node-consolidation-timeout", "MULTI_NODE_CONSOLIDATION_TIMEOUT", o.MultiNodeConsolidationTimeout, false},
		{"consolidation-churn-memory", "CONSOLIDATION_CHURN_MEMORY", o.ConsolidationChurnMemory, true},
	} {
		if d.v < 0 || d.v == 0 && !d.zeroOK {
			want := "must be positive"
			if d.zeroOK {
				want = "must not be negative"
			}
			p.bad(d.flag, d.env, d.v, want)
		}
	}
}

// validateAWS checks the settings of the AWS provider, and that they are set only with it.
func (o Options) validateAWS(p *problems) {
	if o.ReservedENIs < 0 {
		p.bad("reserved-enis", "RESERVED_ENIS", o.ReservedENIs, "must not be negative")
	}
	for _, s := range []struct {
		flag, env string
		on        bool
	}{{"isolated-vpc", "ISOLATED_VPC", o.IsolatedVPC}, {"eks-control-plane", "EKS_CONTROL_PLANE", o.EKSControlPlane},
		{"reserved-enis", "RESERVED_ENIS", o.ReservedENIs != 0}} {
		if s.on && o.CloudProvider != CloudProviderAWS {
			p.bad(s.flag, s.env, "set", "needs --cloud-provider aws")
		}
	}
	if o.VMMemoryOverheadPercent < 0 || o.VMMemoryOverheadPercent >= 1 {
		p.bad("vm-memory-overhead-percent", "VM_MEMORY_OVERHEAD_PERCENT", o.VMMemoryOverheadPercent, "must be a fraction in [0, 1)")
	}
	for _, r := range []struct {
		flag, env string
		v         time.Duration
	}{{"ami-refresh-interval", "AMI_REFRESH_INTERVAL", o.AMIRefreshInterval}, {"subnet-refresh-interval", "SUBNET_REFRESH_INTERVAL", o.SubnetRefreshInterval},
		{"security-group-refresh-interval", "SECURITY_GROUP_REFRESH_INTERVAL", o.SecurityGroupRefreshInterval}} {
		if r.v < time.Minute {
			p.bad(r.flag, r.env, r.v, "must be at least 1m")
		}
	}
	if o.InterruptionQueue != "" && o.CloudProvider != CloudProviderAWS {
		p.bad("interruption-queue", "INTERRUPTION_QUEUE", o.InterruptionQueue, "needs --cloud-provider aws")
	}
	if o.ReplaceOnRebalance && o.InterruptionQueue == "" {
		p.bad("replace-on-rebalance-recommendation", "REPLACE_ON_REBALANCE_RECOMMENDATION", o.ReplaceOnRebalance, "needs --interruption-queue (rebalance recommendations arrive there)")
	}
}

// metricsAddress is where /metrics is served.
func (o Options) metricsAddress() string {
	if o.MetricsBindAddress != "" {
		return o.MetricsBindAddress
	}
	return fmt.Sprintf(":%d", o.MetricsPort)
}

// healthAddress is where the health probes are served.
func (o Options) healthAddress() string {
	if o.HealthProbeBindAddress != "" {
		return o.HealthProbeBindAddress
	}
	return fmt.Sprintf(":%d", o.HealthProbePort)
}

// Usage writes every flag with its environment variable and default.
func Usage(w io.Writer) {
	var o Options
	var r raw
	fs, envs := define(&o, &r)
	fmt.Fprintln(w, "Usage: capstan [flags]")
	fmt.Fprintln(w, "Each setting may also come from its environment variable; a flag given wins.")
	fs.VisitAll(func(f *flag.Flag) {
		env := ""
		if e := envs[f.Name]; e != "" {
			env = " (" + e + ")"
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = " [default " + f.DefValue + "]"
		}
		fmt.Fprintf(w, "  --%s%s%s\n      %s\n", f.Name, env, def, f.Usage)
	})
}

// Environ is os.Getenv, for Parse.
func Environ(k string) string { return os.Getenv(k) }

// NodeClassResync is how often an EC2NodeClass is resolved again: the shortest of the three
// refresh intervals, so that none of its parts is staler than asked.
func (o Options) NodeClassResync() time.Duration {
	return min(o.AMIRefreshInterval, o.SubnetRefreshInterval, o.SecurityGroupRefreshInterval)
}

// maxSpendingLimit is the largest cluster spending limit accepted: a billion dollars an hour,
// far past any cluster, and within the milli-dollar arithmetic of the limit.
const maxSpendingLimit = 1e9
