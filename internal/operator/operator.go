package operator

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/controllers/nodeclaim/disruption"
	"capstan.dev/capstan/internal/controllers/nodeclaim/expiration"
	"capstan.dev/capstan/internal/controllers/nodeclaim/garbagecollection"
	"capstan.dev/capstan/internal/controllers/nodeclaim/lifecycle"
	"capstan.dev/capstan/internal/controllers/nodeclaim/podevents"
	"capstan.dev/capstan/internal/controllers/nodeclaim/termination"
	"capstan.dev/capstan/internal/controllers/nodepool/status"
	"capstan.dev/capstan/internal/controllers/provisioning"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/scheme"
)

// NewLogger is the JSON logger with the keys users grep for: level, time, logger, message.
func NewLogger(level string) logr.Logger {
	lvl := zapcore.InfoLevel
	if level == "debug" {
		lvl = zapcore.DebugLevel
	}
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{
		TimeKey: "time", LevelKey: "level", NameKey: "logger", MessageKey: "message", CallerKey: "", StacktraceKey: "stacktrace",
		LineEnding: zapcore.DefaultLineEnding, EncodeLevel: zapcore.CapitalLevelEncoder,
		EncodeTime: zapcore.ISO8601TimeEncoder, EncodeDuration: zapcore.StringDurationEncoder,
	})
	return zap.New(zap.Encoder(enc), zap.Level(lvl))
}

// Operator is an assembled Capstan.
type Operator struct {
	Manager     manager.Manager
	Cloud       cloudprovider.CloudProvider
	Provisioner *provisioning.Provisioner
	// SimCloud is the simulated cloud when CloudProvider is sim.
	SimCloud *sim.Cloud
}

// RESTConfig resolves the API server from --kubeconfig, $KUBECONFIG or the in-cluster config.
func RESTConfig(o Options) (*rest.Config, error) {
	if o.Kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("reading kubeconfig %s: %w", o.Kubeconfig, err)
		}
		return cfg, nil
	}
	return ctrl.GetConfig()
}

// New builds Capstan on cfg.
func New(cfg *rest.Config, o Options, clk clock.Clock, log logr.Logger) (*Operator, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 300
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		Logger:                  log,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "capstan-leader-election",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsBindAddress},
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return nil, fmt.Errorf("indexing pods by node: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	m, err := metrics.New(metrics.Registry())
	if err != nil {
		return nil, fmt.Errorf("registering metrics: %w", err)
	}
	op := &Operator{Manager: mgr}
	unavailable := cloudprovider.NewUnavailableOfferings(clk, cloudprovider.DefaultUnavailableTTL)
	switch o.CloudProvider {
	case CloudProviderSim:
		cloud, err := sim.NewCloud(clk, o.SimStateFile)
		if err != nil {
			return nil, err
		}
		p, err := sim.NewProvider(mgr.GetClient(), cloud, clk, unavailable)
		if err != nil {
			return nil, err
		}
		op.Cloud, op.SimCloud = p, cloud
		if err := mgr.Add(&sim.Joiner{Cloud: cloud, Client: mgr.GetClient()}); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--cloud-provider %q: the AWS provider is not built yet; use sim", o.CloudProvider)
	}
	c := mgr.GetClient()
	launches := &nodeclaims.Launches{}
	op.Provisioner = &provisioning.Provisioner{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: mgr.GetEventRecorder("karpenter"),
		BatchIdle: o.BatchIdleDuration, BatchMax: o.BatchMaxDuration, Metrics: m}
	if err := mgr.Add(op.Provisioner); err != nil {
		return nil, err
	}
	for _, r := range []interface{ Register(ctrl.Manager) error }{
		&provisioning.PodTrigger{Provisioner: op.Provisioner},
		&lifecycle.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: mgr.GetEventRecorder("karpenter"), Metrics: m, Launches: launches},
		&termination.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: mgr.GetEventRecorder("karpenter"), Metrics: m, Launches: launches},
		&expiration.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: mgr.GetEventRecorder("karpenter"), Metrics: m},
		&status.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Metrics: m},
		&disruption.Controller{Client: c, Cloud: op.Cloud, Clock: clk},
		&podevents.Controller{Client: c, Clock: clk},
	} {
		if err := r.Register(mgr); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(&garbagecollection.Controller{Client: c, Cloud: op.Cloud, Clock: clk}); err != nil {
		return nil, err
	}
	return op, nil
}
