// Package operator assembles Capstan: options from flags and the environment, the JSON logger, the
// controller-runtime manager with leader election, health checks and metrics, the cloud provider
// and every controller. cmd/capstan runs it; end-to-end tests start it in-process.
package operator

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// Options configure Capstan. Every flag can also be set through the environment variable of its
// name in upper case with underscores (CLUSTER_NAME, BATCH_IDLE_DURATION …); a flag given on
// the command line wins.
type Options struct {
	ClusterName             string
	CloudProvider           string
	BatchIdleDuration       time.Duration
	BatchMaxDuration        time.Duration
	MetricsBindAddress      string
	HealthProbeBindAddress  string
	LogLevel                string
	LeaderElection          bool
	LeaderElectionNamespace string
	SimStateFile            string
	Kubeconfig              string
}

// CloudProviderSim and CloudProviderAWS are the supported cloud providers.
const (
	CloudProviderSim = "sim"
	CloudProviderAWS = "aws"
)

// Parse reads options from args and the environment.
func Parse(args []string, getenv func(string) string) (Options, error) {
	var o Options
	fs := flag.NewFlagSet("capstan", flag.ContinueOnError)
	fs.StringVar(&o.ClusterName, "cluster-name", "capstan-local", "name of the cluster, used to tag and find its machines")
	fs.StringVar(&o.CloudProvider, "cloud-provider", CloudProviderSim, "cloud provider: sim or aws")
	fs.DurationVar(&o.BatchIdleDuration, "batch-idle-duration", time.Second, "a batch of pending pods ends when none arrived for this long")
	fs.DurationVar(&o.BatchMaxDuration, "batch-max-duration", 10*time.Second, "the longest a batch of pending pods waits")
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "address of the Prometheus /metrics endpoint (0 disables)")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.StringVar(&o.LogLevel, "log-level", "info", "log level: info or debug")
	fs.BoolVar(&o.LeaderElection, "leader-elect", true, "elect a leader so that only one replica acts")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "kube-system", "namespace of the leader-election lease")
	fs.StringVar(&o.SimStateFile, "sim-state-file", "", "file the simulated cloud keeps its machines in, so they survive a restart")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig to reach the API server (default: in-cluster or $KUBECONFIG)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" && !set[f.Name] {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return o, err
	}
	return o, o.Validate()
}

// Validate checks the options and names the bad one.
func (o Options) Validate() error {
	var errs []error
	if o.CloudProvider != CloudProviderSim && o.CloudProvider != CloudProviderAWS {
		errs = append(errs, fmt.Errorf("--cloud-provider %q: must be sim or aws", o.CloudProvider))
	}
	if o.BatchIdleDuration <= 0 || o.BatchMaxDuration <= 0 || o.BatchIdleDuration > o.BatchMaxDuration {
		errs = append(errs, fmt.Errorf("--batch-idle-duration %s and --batch-max-duration %s: both must be positive and idle at most max",
			o.BatchIdleDuration, o.BatchMaxDuration))
	}
	if o.LogLevel != "info" && o.LogLevel != "debug" {
		errs = append(errs, fmt.Errorf("--log-level %q: must be info or debug", o.LogLevel))
	}
	if o.ClusterName == "" {
		errs = append(errs, errors.New("--cluster-name: must not be empty"))
	}
	return errors.Join(errs...)
}

// Environ is os.Getenv, for Parse.
func Environ(k string) string { return os.Getenv(k) }
