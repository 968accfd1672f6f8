package operator

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/disruptionplan"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// Karpenter's environment variables configure Capstan with their meaning; a flag wins.
func TestKarpenterEnvironmentVariables(t *testing.T) {
	o, err := Parse(nil, env(map[string]string{
		"METRICS_PORT": "9090", "HEALTH_PROBE_PORT": "9091", "DISABLE_LEADER_ELECTION": "true",
		"LEADER_ELECTION_NAME": "my-lease", "KUBE_CLIENT_QPS": "50", "KUBE_CLIENT_BURST": "80", "LOG_LEVEL": "error",
		"LOG_OUTPUT_PATHS": "stdout,/tmp/capstan.log", "LOG_ERROR_OUTPUT_PATHS": "stderr",
		"FEATURE_GATES": "SpotToSpotConsolidation=true", "PREFERENCE_POLICY": "Ignore", "MIN_VALUES_POLICY": "BestEffort",
		"BATCH_MAX_DURATION": "20s", "BATCH_IDLE_DURATION": "2s", "CLUSTER_NAME": "prod-east", "MEMORY_LIMIT": "1073741824",
		"NODE_COST": "0.012", "SPENDING_LIMIT": "250.5",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if o.metricsAddress() != ":9090" || o.healthAddress() != ":9091" || !o.DisableLeaderElection || o.LeaderElectionName != "my-lease" ||
		o.KubeClientQPS != 50 || o.KubeClientBurst != 80 || o.LogLevel != "error" || o.PreferencePolicy != PreferencePolicyIgnore ||
		o.MinValuesPolicy != MinValuesPolicyBest || o.BatchMaxDuration != 20*time.Second || o.BatchIdleDuration != 2*time.Second ||
		o.ClusterName != "prod-east" || o.MemoryLimit != 1<<30 || o.NodeCost != 0.012 || o.SpendingLimit != 250.5 {
		t.Fatalf("options %+v", o)
	}
	if strings.Join(o.LogOutputPaths, ",") != "stdout,/tmp/capstan.log" || strings.Join(o.LogErrorOutputPaths, ",") != "stderr" {
		t.Fatalf("log paths %v %v", o.LogOutputPaths, o.LogErrorOutputPaths)
	}
	if !o.FeatureGates.SpotToSpotConsolidation || !o.FeatureGates.ReservedCapacity || o.FeatureGates.NodeRepair ||
		!o.FeatureGates.PodDeletionCostManagement {
		t.Fatalf("feature gates %v: want the one set on the defaults (Karpenter's, PodDeletionCostManagement on)", o.FeatureGates)
	}
	if off, err := Parse(nil, env(map[string]string{"FEATURE_GATES": "PodDeletionCostManagement=false"})); err != nil || off.FeatureGates.PodDeletionCostManagement {
		t.Fatalf("PodDeletionCostManagement=false: %v, %v", off.FeatureGates, err)
	}
	o, err = Parse([]string{"--metrics-port=7000"}, env(map[string]string{"METRICS_PORT": "9090"}))
	if err != nil || o.MetricsPort != 7000 {
		t.Fatalf("a flag must win over its variable: %d, %v", o.MetricsPort, err)
	}
}

func TestAWSSettings(t *testing.T) {
	o, err := Parse([]string{"--cloud", "aws"}, env(map[string]string{"CLOUD_PROVIDER": "sim", "AWS_REGION": "eu-west-1",
		"AWS_ENDPOINT_URL": "http://127.0.0.1:4566", "CLUSTER_ENDPOINT": "https://k.example", "INTERRUPTION_QUEUE": "prod-east",
		"VM_MEMORY_OVERHEAD_PERCENT": "0.05"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.CloudProvider != CloudProviderAWS || o.AWSRegion != "eu-west-1" || o.AWSEndpointURL != "http://127.0.0.1:4566" ||
		o.ClusterEndpoint != "https://k.example" || o.InterruptionQueue != "prod-east" || o.VMMemoryOverheadPercent != 0.05 {
		t.Fatalf("options %+v (--cloud must win over CLOUD_PROVIDER)", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cloud-provider=aws", "--vm-memory-overhead-percent=1.5"}, `--vm-memory-overhead-percent (VM_MEMORY_OVERHEAD_PERCENT) "1.5": must be a fraction in [0, 1)`},
		{[]string{"--interruption-queue=q"}, `--interruption-queue (INTERRUPTION_QUEUE) "q": needs --cloud-provider aws`},
		{[]string{"--cloud-provider=aws", "--subnet-refresh-interval=30s"}, `--subnet-refresh-interval (SUBNET_REFRESH_INTERVAL) "30s": must be at least 1m`},
		{[]string{"--cloud-provider=aws", "--reserved-enis=-1"}, `--reserved-enis (RESERVED_ENIS) "-1": must not be negative`},
		{[]string{"--isolated-vpc"}, `--isolated-vpc (ISOLATED_VPC) "set": needs --cloud-provider aws`},
		{[]string{"--cloud-provider=aws", "--aws-feature-gates=NodeClassCEL=false,RebootForRepair=true"}, `--aws-feature-gates (AWS_FEATURE_GATES): RebootForRepair=true: Capstan implements no AWS feature gate`},
		{[]string{"--cloud-provider=aws", "--replace-on-rebalance-recommendation"}, `needs --interruption-queue`},
	} {
		if _, err := Parse(tc.args, env(nil)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// Karpenter's AWS settings, by their variables.
func TestKarpenterAWSSettings(t *testing.T) {
	o, err := Parse([]string{"--cloud", "aws"}, env(map[string]string{"ISOLATED_VPC": "true", "RESERVED_ENIS": "1", "EKS_CONTROL_PLANE": "true",
		"AWS_FEATURE_GATES": "NodeClassCEL=false,DRA=false"}))
	if err != nil {
		t.Fatal(err)
	}
	if !o.IsolatedVPC || o.ReservedENIs != 1 || !o.EKSControlPlane {
		t.Fatalf("options %+v", o)
	}
}

// Karpenter's three refresh intervals are read from its variables (default 1m each), and an
// EC2NodeClass is resolved again at the shortest of them.
func TestNodeClassRefreshIntervals(t *testing.T) {
	o, err := Parse([]string{"--cloud", "aws"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.AMIRefreshInterval != time.Minute || o.SubnetRefreshInterval != time.Minute || o.SecurityGroupRefreshInterval != time.Minute || o.NodeClassResync() != time.Minute {
		t.Fatalf("defaults %v %v %v, resync %v; want 1m", o.AMIRefreshInterval, o.SubnetRefreshInterval, o.SecurityGroupRefreshInterval, o.NodeClassResync())
	}
	o, err = Parse([]string{"--cloud", "aws"}, env(map[string]string{"AMI_REFRESH_INTERVAL": "10m", "SUBNET_REFRESH_INTERVAL": "3m", "SECURITY_GROUP_REFRESH_INTERVAL": "5m"}))
	if err != nil {
		t.Fatal(err)
	}
	if o.AMIRefreshInterval != 10*time.Minute || o.NodeClassResync() != 3*time.Minute {
		t.Fatalf("AMI %v, resync %v; want 10m and the shortest, 3m", o.AMIRefreshInterval, o.NodeClassResync())
	}
}

// A bad value is an error naming the variable or flag; several are all reported.
func TestBadSettingsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"unknown feature gate", nil, map[string]string{"FEATURE_GATES": "Teleport=true"}, []string{"FEATURE_GATES", `unknown feature gate "Teleport"`}},
		{"feature gate not a bool", nil, map[string]string{"FEATURE_GATES": "NodeRepair=maybe"}, []string{"FEATURE_GATES", "NodeRepair"}},
		{"log level", nil, map[string]string{"LOG_LEVEL": "warn"}, []string{"LOG_LEVEL", `"warn"`, "debug, info or error"}},
		{"port not a number", nil, map[string]string{"METRICS_PORT": "http"}, []string{"METRICS_PORT", `"http"`}},
		{"port out of range", nil, map[string]string{"HEALTH_PROBE_PORT": "70000"}, []string{"HEALTH_PROBE_PORT", "port number"}},
		{"preference policy", nil, map[string]string{"PREFERENCE_POLICY": "respect"}, []string{"PREFERENCE_POLICY", "Respect or Ignore"}},
		{"min values policy", nil, map[string]string{"MIN_VALUES_POLICY": "Lenient"}, []string{"MIN_VALUES_POLICY", "Strict or BestEffort"}},
		{"duration", nil, map[string]string{"BATCH_IDLE_DURATION": "soon"}, []string{"BATCH_IDLE_DURATION", `"soon"`}},
		{"idle above max", []string{"--batch-idle-duration=30s"}, nil, []string{"BATCH_MAX_DURATION", "at least the batch idle duration"}},
		{"qps", nil, map[string]string{"KUBE_CLIENT_QPS": "0"}, []string{"KUBE_CLIENT_QPS", "positive"}},
		{"node cost negative", nil, map[string]string{"NODE_COST": "-0.01"}, []string{"NODE_COST", `"-0.01"`, "non-negative"}},
		{"node cost not a number", []string{"--node-cost=cheap"}, nil, []string{"node-cost", "cheap"}},
		{"spending limit negative", nil, map[string]string{"SPENDING_LIMIT": "-5"}, []string{"SPENDING_LIMIT", `"-5"`, "between 0 and"}},
		{"spending limit not a number", []string{"--spending-limit=NaN"}, nil, []string{"spending-limit", "NaN"}},
		{"spending limit past any cluster", nil, map[string]string{"SPENDING_LIMIT": "1e30"}, []string{"SPENDING_LIMIT", "1e30"}},
		{"underutilized k negative", nil, map[string]string{"UNDERUTILIZED_CONSOLIDATION_K": "-1"}, []string{"UNDERUTILIZED_CONSOLIDATION_K", "-1", "not be negative"}},
		{"underutilized k not a number", []string{"--underutilized-consolidation-k=lots"}, nil, []string{"underutilized-consolidation-k", "lots"}},
		{"two at once", nil, map[string]string{"LOG_LEVEL": "warn", "CLOUD_PROVIDER": "gcp"}, []string{"LOG_LEVEL", "CLOUD_PROVIDER"}},
		{"unknown flag", []string{"--teleport"}, nil, []string{"teleport"}},
		{"scheduler config", nil, map[string]string{"SCHEDULER_CONFIG": "podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: z, whenUnsatisfiable: DoNotSchedule}]}"}, []string{"SCHEDULER_CONFIG", "defaultConstraints[0].maxSkew 0"}},
		{"DRA planning asked for", nil, map[string]string{"IGNORE_DRA_REQUESTS": "false"}, []string{"IGNORE_DRA_REQUESTS", "does not simulate Dynamic Resource Allocation"}},
		{"sim faults unknown", nil, map[string]string{"SIM_FAULTS": "errors=10,floods=5"}, []string{"SIM_FAULTS", `unknown fault "floods"`}},
		{"sim faults past 100%", []string{"--sim-faults=errors=80,hangs=30"}, nil, []string{"sim-faults", "more than 100%"}},
		{"sim faults seed 0", []string{"--sim-faults=errors=10,seed=0"}, nil, []string{"sim-faults", `"seed=0"`, "above 0"}},
		{"DRA setting not a bool", []string{"--ignore-dra-requests=sometimes"}, nil, []string{"ignore-dra-requests", "sometimes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.args, env(tc.env))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// --help lists every flag with its variable; --help and --version are not errors.
func TestHelpAndVersion(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--version"}} {
		o, err := Parse(args, env(nil))
		if err != nil || !(o.Help || o.Version) {
			t.Fatalf("%v: %+v, %v", args, o, err)
		}
	}
	var b bytes.Buffer
	Usage(&b)
	for _, want := range []string{"--metrics-port (METRICS_PORT) [default 8080]", "--feature-gates (FEATURE_GATES)", "--disable-leader-election (DISABLE_LEADER_ELECTION)",
		"--log-error-output-paths (LOG_ERROR_OUTPUT_PATHS)", "--min-values-policy (MIN_VALUES_POLICY)", "--kubeconfig", "--version"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("usage lacks %q:\n%s", want, b.String())
		}
	}
}

// KUBECONFIG may list several files, merged as kubectl merges them.
func TestKubeconfigPathList(t *testing.T) {
	dir := t.TempDir()
	clusters := filepath.Join(dir, "clusters")
	users := filepath.Join(dir, "users")
	write := func(path, body string) {
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(clusters, `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
`)
	write(users, `apiVersion: v1
kind: Config
users: [{name: u, user: {token: secret-token}}]
`)
	t.Setenv("KUBECONFIG", clusters+string(os.PathListSeparator)+users)
	cfg, err := RESTConfig(Options{}, os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host != "https://127.0.0.1:6443" || cfg.BearerToken != "secret-token" {
		t.Fatalf("host %q token %q: want both files merged", cfg.Host, cfg.BearerToken)
	}
}

// The logger writes JSON to every output path at the chosen level.
func TestLoggerOutputPathsAndLevel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "capstan.log")
	log, err := NewLogger(Options{LogLevel: "error", LogOutputPaths: []string{path}, LogErrorOutputPaths: []string{"stderr"}})
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden at error level")
	log.Error(os.ErrNotExist, "shown", "key", "value")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if strings.Contains(out, "hidden") || !strings.Contains(out, `"message":"shown"`) || !strings.Contains(out, `"level":"ERROR"`) {
		t.Fatalf("log file:\n%s", out)
	}
	if strings.Contains(out, "stacktrace") {
		t.Fatalf("an expected error logged a stack trace:\n%s", out)
	}
	if _, err := NewLogger(Options{LogLevel: "info", LogOutputPaths: []string{"/nonexistent-dir/x.log"}}); err == nil ||
		!strings.Contains(err.Error(), "LOG_OUTPUT_PATHS") {
		t.Fatalf("an unwritable path: %v", err)
	}
}

// Every gate of Karpenter v1.15 parses into its field, over Capstan's defaults; a gate Capstan
// does not know, or a value that is not a boolean, is refused naming it.
func TestFeatureGatesParseIntoTheirFields(t *testing.T) {
	o, err := Parse(nil, env(map[string]string{"FEATURE_GATES": "ReservedCapacity=false,SpotToSpotConsolidation=true,NodeOverlay=true,StaticCapacity=true,NodeRepair=true,CapacityBuffer=true,TerminateFirstDrift=true,TerminateFirstRepair=true"}))
	want := FeatureGates{SpotToSpotConsolidation: true, NodeOverlay: true, StaticCapacity: true, NodeRepair: true, CapacityBuffer: true,
		TerminateFirstDrift: true, TerminateFirstRepair: true, PodDeletionCostManagement: true}
	if err != nil || o.FeatureGates != want {
		t.Fatalf("gates %+v, %v; want %+v", o.FeatureGates, err, want)
	}
	if d, err := Parse(nil, env(nil)); err != nil || d.FeatureGates != (FeatureGates{ReservedCapacity: true, PodDeletionCostManagement: true}) {
		t.Fatalf("default gates %+v, %v", d.FeatureGates, err)
	}
	for v, say := range map[string]string{"NextKarpenterGate=true": `unknown feature gate "NextKarpenterGate"`, "NodeRepair=maybe": "NodeRepair", "NodeRepair": "NodeRepair"} {
		if _, err := Parse(nil, env(map[string]string{"FEATURE_GATES": v})); err == nil || !strings.Contains(err.Error(), "FEATURE_GATES") || !strings.Contains(err.Error(), say) {
			t.Errorf("FEATURE_GATES=%s: error %v, want one naming FEATURE_GATES and %q", v, err, say)
		}
	}
}

// SCHEDULER_CONFIG, Karpenter's shape, gives the default constraints.
func TestSchedulerConfig(t *testing.T) {
	o, err := Parse(nil, env(map[string]string{"SCHEDULER_CONFIG": `{"podTopologySpread":{"defaultConstraints":[{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"DoNotSchedule"}]}}`}))
	if err != nil || len(o.SchedulerConfig.Constraints()) != 1 || o.SchedulerConfig.Constraints()[0].TopologyKey != "topology.kubernetes.io/zone" {
		t.Fatalf("options %+v, error %v", o.SchedulerConfig, err)
	}
	if o, err := Parse(nil, env(nil)); err != nil || o.SchedulerConfig.Constraints() != nil {
		t.Fatalf("without SCHEDULER_CONFIG: %+v, %v", o.SchedulerConfig, err)
	}
}

// IGNORE_DRA_REQUESTS=true, Karpenter's default, is accepted whether set or not.
func TestIgnoreDRARequestsTrueIsAccepted(t *testing.T) {
	for _, e := range []map[string]string{nil, {"IGNORE_DRA_REQUESTS": "true"}} {
		if _, err := Parse(nil, env(e)); err != nil {
			t.Fatalf("%v: %v", e, err)
		}
	}
}

// Consolidation planning is on unless turned off by flag or variable; a bad value names both.
func TestConsolidationPlanningSetting(t *testing.T) {
	o, err := Parse(nil, env(nil))
	if err != nil || !o.ConsolidationPlanning {
		t.Fatalf("default: planning %v, err %v; want on", o.ConsolidationPlanning, err)
	}
	o, err = Parse(nil, env(map[string]string{"CONSOLIDATION_PLANNING": "false"}))
	if err != nil || o.ConsolidationPlanning {
		t.Fatalf("CONSOLIDATION_PLANNING=false: planning %v, err %v; want off", o.ConsolidationPlanning, err)
	}
	if _, err := Parse([]string{"--consolidation-planning=maybe"}, env(nil)); err == nil || !strings.Contains(err.Error(), "consolidation-planning") {
		t.Errorf("bad value: %v, want an error naming the flag", err)
	}
}

func TestUnderutilizedConsolidationK(t *testing.T) {
	o, err := Parse(nil, env(nil))
	if err != nil || o.UnderutilizedConsolidationK != 3 || underutilizedK(o.UnderutilizedConsolidationK) != 3 {
		t.Fatalf("default: k %v, err %v; want 3", o.UnderutilizedConsolidationK, err)
	}
	// 0 is Karpenter's WhenEmptyOrUnderutilized: the decision core's score turned off (a negative
	// k; its zero means its default).
	o, err = Parse(nil, env(map[string]string{"UNDERUTILIZED_CONSOLIDATION_K": "0"}))
	if err != nil || underutilizedK(o.UnderutilizedConsolidationK) >= 0 {
		t.Fatalf("UNDERUTILIZED_CONSOLIDATION_K=0: k %v, err %v; want the score off", underutilizedK(o.UnderutilizedConsolidationK), err)
	}
	o, err = Parse([]string{"--underutilized-consolidation-k=2"}, env(map[string]string{"UNDERUTILIZED_CONSOLIDATION_K": "5"}))
	if err != nil || o.UnderutilizedConsolidationK != 2 {
		t.Fatalf("flag over variable: k %v, err %v; want 2", o.UnderutilizedConsolidationK, err)
	}
}

// On AWS node repair also acts on the EKS node monitoring agent's conditions, on the simulated
// cloud on its injected fault.
func TestRepairPoliciesPerCloud(t *testing.T) {
	has := func(cloud string, typ corev1.NodeConditionType) bool {
		return slices.ContainsFunc(RepairPolicies(cloud), func(p disruptionplan.RepairPolicy) bool { return p.ConditionType == typ })
	}
	if !has(CloudProviderSim, corev1.NodeReady) || has(CloudProviderSim, "KernelReady") || !has(CloudProviderAWS, "KernelReady") || !has(CloudProviderAWS, corev1.NodeReady) ||
		!has(CloudProviderSim, disruptionplan.SimulatedUnhealthyCondition) || has(CloudProviderAWS, disruptionplan.SimulatedUnhealthyCondition) {
		t.Fatalf("sim %v, aws %v", RepairPolicies(CloudProviderSim), RepairPolicies(CloudProviderAWS))
	}
}

func TestSimFaults(t *testing.T) {
	o, err := Parse([]string{"--sim-faults=errors=20,hangs=5%,seed=4"}, env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if o.SimFaults != (sim.Faults{ErrorPercent: 20, HangPercent: 5, Seed: 4}) {
		t.Errorf("SimFaults = %+v, want 20%% errors, 5%% hangs, seed 4", o.SimFaults)
	}
	if o, err := Parse(nil, env(nil)); err != nil || o.SimFaults != (sim.Faults{}) {
		t.Errorf("by default SimFaults = %+v, %v; want none", o.SimFaults, err)
	}
}

func TestCalmAfterScaleDown(t *testing.T) {
	o, err := Parse(nil, env(nil))
	if err != nil || o.CalmAfterScaleDown != 10*time.Minute || offWhenZero(o.CalmAfterScaleDown) != 10*time.Minute {
		t.Fatalf("default: %v, err %v; want 10m", o.CalmAfterScaleDown, err)
	}
	o, err = Parse(nil, env(map[string]string{"CALM_AFTER_SCALE_DOWN": "0s"}))
	if err != nil || offWhenZero(o.CalmAfterScaleDown) >= 0 {
		t.Fatalf("CALM_AFTER_SCALE_DOWN=0s: %v, err %v; want the rule off", offWhenZero(o.CalmAfterScaleDown), err)
	}
	o, err = Parse([]string{"--calm-after-scale-down=3m"}, env(map[string]string{"CALM_AFTER_SCALE_DOWN": "20m"}))
	if err != nil || o.CalmAfterScaleDown != 3*time.Minute {
		t.Fatalf("flag over variable: %v, err %v; want 3m", o.CalmAfterScaleDown, err)
	}
	if _, err = Parse([]string{"--calm-after-scale-down=-1m"}, env(nil)); err == nil || !strings.Contains(err.Error(), "CALM_AFTER_SCALE_DOWN") {
		t.Errorf("negative: %v, want an error naming the setting", err)
	}
}
