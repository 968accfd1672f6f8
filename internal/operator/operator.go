package operator

import (
	"context"
	"fmt"
	"slices"

	"net/http"
	"net/http/pprof"
	"runtime/debug"
	"time"

	"github.com/go-logr/logr"
	uberzap "go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	awsv1 "capstan.dev/capstan/api/aws/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/bufferstore"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	capacitybufferctl "capstan.dev/capstan/internal/controllers/capacitybuffer"
	disruptionctl "capstan.dev/capstan/internal/controllers/disruption"
	"capstan.dev/capstan/internal/controllers/nodeclaim/disruption"
	"capstan.dev/capstan/internal/controllers/nodeclaim/expiration"
	"capstan.dev/capstan/internal/controllers/nodeclaim/garbagecollection"
	"capstan.dev/capstan/internal/controllers/nodeclaim/lifecycle"
	"capstan.dev/capstan/internal/controllers/nodeclaim/podevents"
	"capstan.dev/capstan/internal/controllers/nodeclaim/reservation"
	"capstan.dev/capstan/internal/controllers/nodeclaim/termination"
	"capstan.dev/capstan/internal/controllers/nodeoverlay"
	"capstan.dev/capstan/internal/controllers/nodepool/static"
	"capstan.dev/capstan/internal/controllers/nodepool/status"
	"capstan.dev/capstan/internal/controllers/pod/deletioncost"
	"capstan.dev/capstan/internal/controllers/pod/startup"
	"capstan.dev/capstan/internal/controllers/provisioning"
	"capstan.dev/capstan/internal/controllers/simnodeclass"
	"capstan.dev/capstan/internal/defaultspread"
	disruptioncore "capstan.dev/capstan/internal/disruption"
	"capstan.dev/capstan/internal/eventkey"
	"capstan.dev/capstan/internal/metrics"
	"capstan.dev/capstan/internal/nodeclaims"
	"capstan.dev/capstan/internal/overlay"
	"capstan.dev/capstan/internal/registration"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/internal/solver"
)

// profilingHandlers serve Go's pprof profiles under /debug/pprof/.
func profilingHandlers() map[string]http.Handler {
	return map[string]http.Handler{
		"/debug/pprof/":        http.HandlerFunc(pprof.Index),
		"/debug/pprof/cmdline": http.HandlerFunc(pprof.Cmdline),
		"/debug/pprof/profile": http.HandlerFunc(pprof.Profile),
		"/debug/pprof/symbol":  http.HandlerFunc(pprof.Symbol),
		"/debug/pprof/trace":   http.HandlerFunc(pprof.Trace),
	}
}

// NewLogger is the JSON logger with the keys users grep for: level, time, logger, message,
// writing to o.LogOutputPaths ("stdout", "stderr" or files) at o.LogLevel (debug, info, error).
// Stack traces are kept for panics; expected errors log without one.
func NewLogger(o Options) (logr.Logger, error) {
	lvl := zapcore.InfoLevel
	switch o.LogLevel {
	case "debug":
		lvl = zapcore.DebugLevel
	case "error":
		lvl = zapcore.ErrorLevel
	}
	out, errOut := o.LogOutputPaths, o.LogErrorOutputPaths
	if len(out) == 0 {
		out = []string{"stdout"}
	}
	if len(errOut) == 0 {
		errOut = []string{"stderr"}
	}
	sink, _, err := uberzap.Open(out...)
	if err != nil {
		return logr.Logger{}, fmt.Errorf("--log-output-paths (LOG_OUTPUT_PATHS) %v: %w", out, err)
	}
	errSink, _, err := uberzap.Open(errOut...)
	if err != nil {
		return logr.Logger{}, fmt.Errorf("--log-error-output-paths (LOG_ERROR_OUTPUT_PATHS) %v: %w", errOut, err)
	}
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{
		TimeKey: "time", LevelKey: "level", NameKey: "logger", MessageKey: "message", CallerKey: "", StacktraceKey: "stacktrace",
		LineEnding: zapcore.DefaultLineEnding, EncodeLevel: zapcore.CapitalLevelEncoder,
		EncodeTime: zapcore.ISO8601TimeEncoder, EncodeDuration: zapcore.StringDurationEncoder,
	})
	return zap.New(zap.Encoder(enc), zap.Level(lvl), zap.WriteTo(sink), zap.StacktraceLevel(zapcore.DPanicLevel),
		zap.RawZapOpts(uberzap.ErrorOutput(errSink))), nil
}

// Operator is an assembled Capstan.
type Operator struct {
	Manager     manager.Manager
	Cloud       cloudprovider.CloudProvider
	Provisioner *provisioning.Provisioner
	// Disruption is the voluntary disruption controller.
	Disruption *disruptionctl.Controller
	// SimCloud is the simulated cloud when CloudProvider is sim.
	SimCloud *sim.Cloud
}

// RESTConfig resolves the API server from --kubeconfig; else from $KUBECONFIG, read as kubectl
// reads it (a list of files, merged) or ~/.kube/config; else from the in-cluster config.
func RESTConfig(o Options, getenv func(string) string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if o.Kubeconfig != "" {
		rules = &clientcmd.ClientConfigLoadingRules{ExplicitPath: o.Kubeconfig}
	} else if getenv(clientcmd.RecommendedConfigPathEnvVar) == "" {
		if cfg, err := rest.InClusterConfig(); err == nil {
			return cfg, nil
		}
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// New builds Capstan on cfg.
func New(cfg *rest.Config, o Options, clk clock.Clock, log logr.Logger) (*Operator, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.KubeClientQPS), o.KubeClientBurst
	if o.MemoryLimit > 0 {
		debug.SetMemoryLimit(o.MemoryLimit / 10 * 9)
	}
	metricsOpts := metricsserver.Options{BindAddress: o.metricsAddress()}
	if o.EnableProfiling {
		metricsOpts.ExtraHandlers = profilingHandlers()
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  s,
		Logger:                  log,
		LeaderElection:          !o.DisableLeaderElection,
		LeaderElectionID:        o.LeaderElectionName,
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		// A replica that stops (a rollout, a drained node) gives up its lease, so that another
		// takes over at once rather than after the lease's 15 seconds.
		LeaderElectionReleaseOnCancel: true,
		HealthProbeBindAddress:        o.healthAddress(),
		Metrics:                       metricsOpts,
	})
	if err != nil {
		return nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return nil, fmt.Errorf("indexing pods by node: %w", err)
	}
	if err := claimstore.IndexProviderIDs(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, err
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
	m.Build(o.BuildVersion, o.BuildCommit)
	if err := metrics.Registry().Register(&metrics.StatusConditions{Reader: mgr.GetClient()}); err != nil {
		return nil, fmt.Errorf("registering status condition metrics: %w", err)
	}
	op := &Operator{Manager: mgr}
	unavailable := cloudprovider.NewUnavailableOfferings(clk, cloudprovider.DefaultUnavailableTTL)
	// overlays hold the NodeOverlays' evaluation when the gate is on: the providers' launches
	// read it, and so does every controller through the wrapped provider below.
	var overlays *overlay.Store
	var nodeClass client.Object
	if o.FeatureGates.NodeOverlay {
		overlays = &overlay.Store{}
	}
	switch o.CloudProvider {
	case CloudProviderSim:
		// The simulated cloud keeps its machines in the cluster (ConfigMaps next to the leader
		// Lease) unless a file is named: they survive restarts and failover like a real cloud's.
		var store sim.Store = &sim.ConfigMapStore{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(),
			Namespace: o.LeaderElectionNamespace, Cluster: o.ClusterName}
		if o.SimStateFile != "" {
			store = &sim.FileStore{Path: o.SimStateFile}
		}
		cloud := sim.NewCloudWithStore(clk, store)
		p, err := sim.NewProvider(mgr.GetClient(), cloud, clk, unavailable)
		if err != nil {
			return nil, err
		}
		if overlays != nil {
			p.SetOverlays(overlays.ForLaunches())
		}
		if !o.FeatureGates.ReservedCapacity {
			p.DisableReservedCapacity()
		}
		if o.SimFaults != (sim.Faults{}) {
			seed := o.SimFaults.Seed
			if seed == 0 {
				seed = uint64(clk.Now().UnixNano())
			}
			log.Info("the simulated cloud injects API faults", "errors-percent", o.SimFaults.ErrorPercent, "hangs-percent", o.SimFaults.HangPercent, "seed", seed)
			p.SetFaults(o.SimFaults, seed)
		}
		op.Cloud, op.SimCloud, nodeClass = p, cloud, &simv1alpha1.SimNodeClass{}
		if err := mgr.Add(&sim.Joiner{Cloud: cloud, Client: mgr.GetClient()}); err != nil {
			return nil, err
		}
		if err := (&simnodeclass.Controller{Client: mgr.GetClient(), Provider: p, Clock: clk}).Register(mgr); err != nil {
			return nil, err
		}
	case CloudProviderAWS:
		p, err := newAWS(cfg, o, mgr, clk, unavailable, log, m)
		if err != nil {
			return nil, err
		}
		if overlays != nil {
			p.SetOverlays(overlays.ForLaunches())
		}
		op.Cloud, nodeClass = p, &awsv1.EC2NodeClass{}
	}
	if !o.FeatureGates.ReservedCapacity {
		log.Info("capacity reservations ignored: the ReservedCapacity feature gate is off")
	}
	// Every call the controllers make to the cloud is bounded (docs/reliability.md).
	op.Cloud = cloudprovider.WithDeadlines(op.Cloud, cloudprovider.Deadlines{})
	c := mgr.GetClient()
	if overlays != nil {
		// The evaluation reads the cloud's own instance types; everything else reads them as
		// the overlays adjust them (docs/features.md, NodeOverlay).
		if err := (&nodeoverlay.Controller{Client: c, Cloud: op.Cloud, Store: overlays, Clock: clk,
			NodeClasses: []client.Object{nodeClass}}).Register(mgr); err != nil {
			return nil, err
		}
		op.Cloud = cloudprovider.WithOverlays(op.Cloud, overlays)
	} else if err := (&nodeoverlay.Controller{Client: c, Clock: clk, Disabled: true}).Register(mgr); err != nil {
		// With the gate off each overlay says, on its conditions, that it is not applied.
		return nil, err
	}
	spread := &defaultspread.Applier{Reader: c, Constraints: o.SchedulerConfig.Constraints()}
	launches := &nodeclaims.Launches{}
	health := &registration.Tracker{}
	op.Provisioner = &provisioning.Provisioner{Client: c, APIReader: mgr.GetAPIReader(), Cloud: op.Cloud, Clock: clk, Recorder: recorder(mgr),
		BatchIdle: o.BatchIdleDuration, BatchMax: o.BatchMaxDuration, Metrics: m,
		SolverOptions: solver.Options{IgnorePreferences: o.PreferencePolicy == PreferencePolicyIgnore, MinValuesBestEffort: o.MinValuesPolicy == MinValuesPolicyBest},
		NodeCost:      o.NodeCost,
		DefaultSpread: spread,
		// As many creates in flight as the client's rate admits at half-second answers (bounded:
		// past a few hundred they only queue in the API server).
		CreateConcurrency: min(256, max(1, o.KubeClientQPS/2))}
	var buffers func(context.Context) ([]*corev1.Pod, error)
	if o.FeatureGates.CapacityBuffer {
		buffers = func(ctx context.Context) ([]*corev1.Pod, error) { return bufferstore.Pods(ctx, c) }
		op.Provisioner.Buffers = buffers
	}
	// With the gate off the buffers' controller only says so on each buffer, and a cluster whose
	// CRDs predate CapacityBuffer (capstan-crd not yet upgraded) must still start.
	_, noCRD := mgr.GetRESTMapper().RESTMapping(autoscalingv1beta1.SchemeGroupVersion.WithKind("CapacityBuffer").GroupKind(), autoscalingv1beta1.SchemeGroupVersion.Version)
	switch {
	case noCRD != nil && o.FeatureGates.CapacityBuffer:
		return nil, fmt.Errorf("--feature-gates (FEATURE_GATES) CapacityBuffer=true needs the capacitybuffers.autoscaling.x-k8s.io CRD (upgrade the capstan-crd chart): %w", noCRD)
	case noCRD != nil:
		log.Info("CapacityBuffers not watched: the capacitybuffers.autoscaling.x-k8s.io CRD is not installed (upgrade the capstan-crd chart)")
	default:
		if err := (&capacitybufferctl.Controller{Client: c, Clock: clk, Enabled: o.FeatureGates.CapacityBuffer, Trigger: op.Provisioner.Trigger}).Register(mgr); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(op.Provisioner); err != nil {
		return nil, err
	}
	for _, r := range []interface{ Register(ctrl.Manager) error }{
		&provisioning.PodTrigger{Provisioner: op.Provisioner},
		&lifecycle.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: recorder(mgr), Metrics: m, Launches: launches, Health: health, Nominated: op.Provisioner},
		&termination.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: recorder(mgr), Metrics: m, Launches: launches},
		&expiration.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: recorder(mgr), Metrics: m},
		&status.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Metrics: m, StaticCapacity: o.FeatureGates.StaticCapacity, Health: health},
		&disruption.Controller{Client: c, Cloud: op.Cloud, Clock: clk},
		&podevents.Controller{Client: c, Clock: clk},
		&startup.Controller{Client: c, Clock: clk, Metrics: m},
	} {
		if err := r.Register(mgr); err != nil {
			return nil, err
		}
	}
	if o.FeatureGates.StaticCapacity {
		if err := (&static.Controller{Client: c, APIReader: mgr.GetAPIReader(), Cloud: op.Cloud, Clock: clk,
			Recorder: recorder(mgr), Metrics: m,
			NodeRepair: o.FeatureGates.NodeRepair, RepairPolicies: RepairPolicies(o.CloudProvider),
			TerminateFirstDrift: o.FeatureGates.TerminateFirstDrift}).Register(mgr); err != nil {
			return nil, err
		}
	}
	dis := &disruptionctl.Controller{Client: c, APIReader: mgr.GetAPIReader(), Cloud: op.Cloud, Clock: clk,
		Recorder: recorder(mgr), Metrics: m, Options: disruptionctl.Options{
			PollPeriod: o.DisruptionPollPeriod, ValidationPeriod: o.DisruptionValidationPeriod, ReplacementTimeout: o.DisruptionReplacementTimeout,
			NodeCost:        o.NodeCost,
			DefaultSpread:   spread,
			Buffers:         buffers,
			MemoryConfigMap: client.ObjectKey{Namespace: o.LeaderElectionNamespace, Name: disruptionctl.MemoryConfigMapName},
			Decision: disruptioncore.Options{
				SpotToSpotConsolidation: o.FeatureGates.SpotToSpotConsolidation, MultiNodeTimeout: o.MultiNodeConsolidationTimeout,
				NodeRepair:          o.FeatureGates.NodeRepair,
				RepairPolicies:      RepairPolicies(o.CloudProvider),
				TerminateFirstDrift: o.FeatureGates.TerminateFirstDrift, TerminateFirstRepair: o.FeatureGates.TerminateFirstRepair,
				EvictionMemory:     churnMemory(o.ConsolidationChurnMemory),
				DisablePlanning:    !o.ConsolidationPlanning,
				UnderutilizedK:     underutilizedK(o.UnderutilizedConsolidationK),
				CalmAfterScaleDown: offWhenZero(o.CalmAfterScaleDown),
				ReplacementSettle:  offWhenZero(o.ReplacementSettle),
				Solver:             solver.Options{IgnorePreferences: o.PreferencePolicy == PreferencePolicyIgnore, MinValuesBestEffort: o.MinValuesPolicy == MinValuesPolicyBest},
			},
		}}
	if o.DisruptionValidationPeriod == 0 {
		dis.Options.ValidationPeriod = -1
	}
	op.Disruption = dis
	if err := mgr.Add(dis); err != nil {
		return nil, err
	}
	if err := mgr.Add(&deletioncost.Controller{Client: c, Clock: clk, Snapshot: dis.Snapshot, Decision: dis.Options.Decision,
		Enabled: o.FeatureGates.PodDeletionCostManagement, Informers: mgr.GetCache()}); err != nil {
		return nil, err
	}
	if o.FeatureGates.ReservedCapacity {
		if err := mgr.Add(&reservation.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Recorder: recorder(mgr)}); err != nil {
			return nil, err
		}
	}
	if err := mgr.Add(&garbagecollection.Controller{Client: c, Cloud: op.Cloud, Clock: clk, Metrics: m}); err != nil {
		return nil, err
	}
	return op, nil
}

// RedirectKlog sends client-go's klog output (leader election, reflectors, throttling) into l,
// so everything Capstan prints is one JSON stream.
func RedirectKlog(l logr.Logger) {
	klog.SetLoggerWithOptions(l.WithName("klog"), klog.ContextualLogger(true))
}

// churnMemory is the decision core's eviction memory for the setting: zero turns the guard off
// (the core reads zero as its default, so it gets a nanosecond).
// underutilizedK is the decision core's k of WhenEmptyOrUnderutilized pools: a negative k turns its
// score off, where the flag says 0.
func underutilizedK(k float64) float64 {
	if k == 0 {
		return -1
	}
	return k
}

// offWhenZero is the decision core's value of a duration setting whose 0 turns it off
// (CalmAfterScaleDown, ReplacementSettle): negative there, since its zero means its default.
func offWhenZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func churnMemory(d time.Duration) time.Duration {
	if d == 0 {
		return time.Nanosecond
	}
	return d
}

// RepairPolicies are the node conditions node repair acts on with the cloud provider: the
// kubelet's Ready everywhere, on AWS the EKS node monitoring agent's conditions, and on the
// simulated cloud its injected fault (SimulatedUnhealthy).
func RepairPolicies(cloud string) []disruptioncore.RepairPolicy {
	out := slices.Clone(disruptioncore.DefaultRepairPolicies)
	switch cloud {
	case CloudProviderAWS:
		out = append(out, disruptioncore.NodeMonitoringAgentPolicies...)
	case CloudProviderSim:
		out = append(out, disruptioncore.SimulatedFaultPolicies...)
	}
	return out
}

// recorder is the recorder the controllers write events with: Karpenter's reporting controller
// name, notes clipped to what the events API stores (it refuses a longer event).
func recorder(mgr manager.Manager) events.EventRecorder {
	return eventkey.Clipping(mgr.GetEventRecorder("karpenter"))
}
