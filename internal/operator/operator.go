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
	"k8s.io/client-go/kubernetes"
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

	autoscalingv1 "capstan.dev/capstan/api/autoscaling/v1"
	autoscalingv1beta1 "capstan.dev/capstan/api/autoscaling/v1beta1"
	awsv1 "capstan.dev/capstan/api/aws/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/bufferstore"
	"capstan.dev/capstan/internal/claimstore"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	capacitybufferctl "capstan.dev/capstan/internal/controllers/capacitybuffer"
	"capstan.dev/capstan/internal/controllers/disruption"
	"capstan.dev/capstan/internal/controllers/nodeclaim/disruptionconditions"
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
	"capstan.dev/capstan/internal/controllers/provisioningrequest"
	"capstan.dev/capstan/internal/controllers/simnodeclass"
	"capstan.dev/capstan/internal/defaultspread"
	"capstan.dev/capstan/internal/disruptionplan"
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
	Disruption *disruption.Controller
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

// New builds Capstan on cfg: the manager, the cloud provider, and every controller, in that
// order.
func New(cfg *rest.Config, o Options, clk clock.Clock, log logr.Logger) (*Operator, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.KubeClientQPS), o.KubeClientBurst
	if o.MemoryLimit > 0 {
		debug.SetMemoryLimit(o.MemoryLimit / 10 * 9)
	}
	mgr, m, err := newManager(cfg, o, log)
	if err != nil {
		return nil, err
	}
	rec, err := eventRecorder(cfg, mgr)
	if err != nil {
		return nil, err
	}
	b := &builder{op: &Operator{Manager: mgr}, o: o, clk: clk, log: log, m: m, c: mgr.GetClient(), rec: rec}
	if o.FeatureGates.NodeOverlay {
		// The NodeOverlays' evaluation: the providers' launches read it, and so does every
		// controller through the wrapped provider.
		b.overlays = &overlay.Store{}
	}
	for _, step := range []func() error{
		func() error { return b.cloud(cfg) },
		b.nodeOverlays,
		b.provisioning,
		b.claimControllers,
		b.disruption,
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return b.op, nil
}

// newManager makes the controller manager (leader election, health probes, metrics server), its
// cache indexes, and Capstan's metrics.
func newManager(cfg *rest.Config, o Options, log logr.Logger) (manager.Manager, *metrics.Metrics, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, nil, err
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
		return nil, nil, fmt.Errorf("creating manager: %w", err)
	}
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Pod{}, "spec.nodeName", func(o client.Object) []string {
		return []string{o.(*corev1.Pod).Spec.NodeName}
	}); err != nil {
		return nil, nil, fmt.Errorf("indexing pods by node: %w", err)
	}
	if err := claimstore.IndexProviderIDs(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, nil, err
	}
	m, err := metrics.New(metrics.Registry())
	if err != nil {
		return nil, nil, fmt.Errorf("registering metrics: %w", err)
	}
	m.Build(o.BuildVersion, o.BuildCommit)
	if err := metrics.Registry().Register(&metrics.StatusConditions{Reader: mgr.GetClient()}); err != nil {
		return nil, nil, fmt.Errorf("registering status condition metrics: %w", err)
	}
	return mgr, m, nil
}

// builder carries what New's steps share.
type builder struct {
	op  *Operator
	o   Options
	clk clock.Clock
	log logr.Logger
	m   *metrics.Metrics
	c   client.Client
	rec events.EventRecorder
	// overlays is the NodeOverlays' evaluation (nil with the gate off); nodeClass an empty
	// object of the cloud's NodeClass kind.
	overlays  *overlay.Store
	nodeClass client.Object
	// spread, buffers and health are shared by the provisioner and other controllers.
	spread  *defaultspread.Applier
	buffers func(context.Context) ([]*corev1.Pod, error)
	health  *registration.Tracker
}

// cloud builds the cloud provider the options name (its NodeClass controller with it), every
// call to it bounded by a deadline (docs/reliability.md).
func (b *builder) cloud(cfg *rest.Config) error {
	o, clk := b.o, b.clk
	unavail := unavailable.New(clk, unavailable.DefaultTTL)
	switch o.CloudProvider {
	case CloudProviderSim:
		p, err := b.sim(unavail)
		if err != nil {
			return err
		}
		b.op.Cloud, b.nodeClass = p, &simv1alpha1.SimNodeClass{}
	case CloudProviderAWS:
		p, err := b.newAWS(cfg, unavail)
		if err != nil {
			return err
		}
		if b.overlays != nil {
			p.SetOverlays(b.overlays.ForLaunches())
		}
		b.op.Cloud, b.nodeClass = p, &awsv1.EC2NodeClass{}
	}
	if !o.FeatureGates.ReservedCapacity {
		b.log.Info("capacity reservations ignored: the ReservedCapacity feature gate is off")
	}
	b.op.Cloud = cloudprovider.WithDeadlines(b.op.Cloud, cloudprovider.Deadlines{})
	return nil
}

// sim builds the simulated cloud, its machines' joiner and the SimNodeClass controller. The
// cloud keeps its machines in the cluster (ConfigMaps next to the leader Lease) unless a file is
// named: they survive restarts and failover like a real cloud's.
func (b *builder) sim(unavailable *unavailable.Offerings) (*sim.Provider, error) {
	mgr, o, clk := b.op.Manager, b.o, b.clk
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
	if b.overlays != nil {
		p.SetOverlays(b.overlays.ForLaunches())
	}
	if !o.FeatureGates.ReservedCapacity {
		p.DisableReservedCapacity()
	}
	if o.SimFaults != (sim.Faults{}) {
		seed := o.SimFaults.Seed
		if seed == 0 {
			seed = uint64(clk.Now().UnixNano())
		}
		b.log.Info("the simulated cloud injects API faults", "errors-percent", o.SimFaults.ErrorPercent, "hangs-percent", o.SimFaults.HangPercent, "seed", seed)
		p.SetFaults(o.SimFaults, seed)
	}
	b.op.SimCloud = cloud
	if err := mgr.Add(&sim.Joiner{Cloud: cloud, Client: mgr.GetClient()}); err != nil {
		return nil, err
	}
	return p, (&simnodeclass.Controller{Client: mgr.GetClient(), Provider: p, Clock: clk}).Register(mgr)
}

// nodeOverlays registers the NodeOverlay controller: with the gate on it evaluates the overlays
// against the cloud's own instance types, and everything else reads them as the overlays adjust
// them (docs/features.md, NodeOverlay); with the gate off each overlay says, on its conditions,
// that it is not applied.
func (b *builder) nodeOverlays() error {
	if b.overlays == nil {
		return (&nodeoverlay.Controller{Client: b.c, Clock: b.clk, Disabled: true}).Register(b.op.Manager)
	}
	if err := (&nodeoverlay.Controller{Client: b.c, Cloud: b.op.Cloud, Store: b.overlays, Clock: b.clk,
		NodeClasses: []client.Object{b.nodeClass}}).Register(b.op.Manager); err != nil {
		return err
	}
	b.op.Cloud = cloudprovider.WithOverlays(b.op.Cloud, b.overlays)
	return nil
}

// provisioning registers the provisioner, its pod trigger and the CapacityBuffer controller.
func (b *builder) provisioning() error {
	mgr, o, c := b.op.Manager, b.o, b.c
	b.spread = &defaultspread.Applier{Reader: c, Constraints: o.SchedulerConfig.Constraints()}
	b.op.Provisioner = &provisioning.Provisioner{Client: c, APIReader: mgr.GetAPIReader(), Cloud: b.op.Cloud, Clock: b.clk, Recorder: b.rec,
		BatchIdle: o.BatchIdleDuration, BatchMax: o.BatchMaxDuration, Metrics: b.m,
		SolverOptions: o.solverOptions(),
		NodeCost:      o.NodeCost,
		SpendingLimit: o.SpendingLimit,
		DefaultSpread: b.spread,
		// As many creates in flight as the client's rate admits at half-second answers (bounded:
		// past a few hundred they only queue in the API server).
		CreateConcurrency: min(256, max(1, o.KubeClientQPS/2))}
	if o.FeatureGates.CapacityBuffer {
		b.buffers = func(ctx context.Context) ([]*corev1.Pod, error) { return bufferstore.Pods(ctx, c) }
		b.op.Provisioner.Buffers = b.buffers
	}
	// With the gate off the buffers' controller only says so on each buffer, and a cluster whose
	// CRDs predate CapacityBuffer (capstan-crd not yet upgraded) must still start.
	_, noCRD := mgr.GetRESTMapper().RESTMapping(autoscalingv1beta1.SchemeGroupVersion.WithKind("CapacityBuffer").GroupKind(), autoscalingv1beta1.SchemeGroupVersion.Version)
	switch {
	case noCRD != nil && o.FeatureGates.CapacityBuffer:
		return fmt.Errorf("--feature-gates (FEATURE_GATES) CapacityBuffer=true needs the capacitybuffers.autoscaling.x-k8s.io CRD (upgrade the capstan-crd chart): %w", noCRD)
	case noCRD != nil:
		b.log.Info("CapacityBuffers not watched: the capacitybuffers.autoscaling.x-k8s.io CRD is not installed (upgrade the capstan-crd chart)")
	default:
		if err := (&capacitybufferctl.Controller{Client: c, Clock: b.clk, Enabled: o.FeatureGates.CapacityBuffer, Trigger: b.op.Provisioner.Trigger}).Register(mgr); err != nil {
			return err
		}
	}
	if err := mgr.Add(b.op.Provisioner); err != nil {
		return err
	}
	// ProvisioningRequests are answered when their CRD is installed (the capstan-crd chart has it).
	if _, err := mgr.GetRESTMapper().RESTMapping(autoscalingv1.SchemeGroupVersion.WithKind("ProvisioningRequest").GroupKind(), autoscalingv1.SchemeGroupVersion.Version); err != nil {
		b.log.Info("ProvisioningRequests not watched: the provisioningrequests.autoscaling.x-k8s.io CRD is not installed (upgrade the capstan-crd chart)")
	} else {
		if err := (&provisioningrequest.Controller{Client: c, APIReader: mgr.GetAPIReader(), Clock: b.clk, Planner: b.op.Provisioner,
			WellKnownLabels: b.op.Cloud.WellKnownLabels(), SolverOptions: o.solverOptions()}).Register(mgr); err != nil {
			return err
		}
		if err := metrics.Registry().Register(&metrics.ProvisioningRequests{Reader: c}); err != nil {
			return err
		}
	}
	return (&provisioning.PodTrigger{Provisioner: b.op.Provisioner}).Register(mgr)
}

// claimControllers registers the NodeClaim and NodePool controllers, and the static pools'.
func (b *builder) claimControllers() error {
	mgr, o, c, clk, m, cloud := b.op.Manager, b.o, b.c, b.clk, b.m, b.op.Cloud
	launches := &nodeclaims.Launches{}
	b.health = &registration.Tracker{}
	for _, r := range []interface{ Register(ctrl.Manager) error }{
		&lifecycle.Controller{Client: c, Cloud: cloud, Clock: clk, Recorder: b.rec, Metrics: m, Launches: launches, Health: b.health, Nominated: b.op.Provisioner},
		&termination.Controller{Client: c, Cloud: cloud, Clock: clk, Recorder: b.rec, Metrics: m, Launches: launches, Capacity: b.op.Provisioner},
		&expiration.Controller{Client: c, Cloud: cloud, Clock: clk, Recorder: b.rec, Metrics: m},
		&status.Controller{Client: c, Cloud: cloud, Clock: clk, Metrics: m, StaticCapacity: o.FeatureGates.StaticCapacity, Health: b.health},
		&disruptionconditions.Controller{Client: c, Cloud: cloud, Clock: clk},
		&podevents.Controller{Client: c, Clock: clk},
		&startup.Controller{Client: c, Clock: clk, Metrics: m},
	} {
		if err := r.Register(mgr); err != nil {
			return err
		}
	}
	if !o.FeatureGates.StaticCapacity {
		return nil
	}
	return (&static.Controller{Client: c, APIReader: mgr.GetAPIReader(), Cloud: cloud, Clock: clk,
		Recorder: b.rec, Metrics: m,
		NodeRepair: o.FeatureGates.NodeRepair, RepairPolicies: RepairPolicies(o.CloudProvider),
		TerminateFirstDrift: o.FeatureGates.TerminateFirstDrift}).Register(mgr)
}

// disruption registers voluntary disruption, the deletion costs that follow its ranking, the
// reservations' controller and garbage collection.
func (b *builder) disruption() error {
	mgr, o, c, clk, m, cloud := b.op.Manager, b.o, b.c, b.clk, b.m, b.op.Cloud
	dis := &disruption.Controller{Client: c, APIReader: mgr.GetAPIReader(), Cloud: cloud, Clock: clk,
		Recorder: b.rec, Metrics: m, Options: disruption.Options{
			PollPeriod: o.DisruptionPollPeriod, ValidationPeriod: o.DisruptionValidationPeriod, ReplacementTimeout: o.DisruptionReplacementTimeout,
			NodeCost:        o.NodeCost,
			SpendingLimit:   o.SpendingLimit,
			DefaultSpread:   b.spread,
			Buffers:         b.buffers,
			MemoryConfigMap: client.ObjectKey{Namespace: o.LeaderElectionNamespace, Name: disruption.MemoryConfigMapName},
			Decision:        o.decisionOptions(),
		}}
	if o.DisruptionValidationPeriod == 0 {
		dis.Options.ValidationPeriod = -1
	}
	b.op.Disruption = dis
	if err := mgr.Add(dis); err != nil {
		return err
	}
	if err := mgr.Add(&deletioncost.Controller{Client: c, Clock: clk, Snapshot: dis.Snapshot, Decision: dis.Options.Decision,
		Enabled: o.FeatureGates.PodDeletionCostManagement, Informers: mgr.GetCache()}); err != nil {
		return err
	}
	if o.FeatureGates.ReservedCapacity {
		if err := mgr.Add(&reservation.Controller{Client: c, Cloud: cloud, Clock: clk, Recorder: b.rec}); err != nil {
			return err
		}
	}
	return mgr.Add(&garbagecollection.Controller{Client: c, Cloud: cloud, Clock: clk, Metrics: m})
}

// solverOptions are the solver's options the settings give.
func (o Options) solverOptions() solver.Options {
	return solver.Options{IgnorePreferences: o.PreferencePolicy == PreferencePolicyIgnore, MinValuesBestEffort: o.MinValuesPolicy == MinValuesPolicyBest}
}

// decisionOptions are the disruption decision core's options the settings and gates give.
func (o Options) decisionOptions() disruptionplan.Options {
	return disruptionplan.Options{
		SpotToSpotConsolidation: o.FeatureGates.SpotToSpotConsolidation, MultiNodeTimeout: o.MultiNodeConsolidationTimeout,
		NodeRepair:          o.FeatureGates.NodeRepair,
		RepairPolicies:      RepairPolicies(o.CloudProvider),
		TerminateFirstDrift: o.FeatureGates.TerminateFirstDrift, TerminateFirstRepair: o.FeatureGates.TerminateFirstRepair,
		EvictionMemory:     churnMemory(o.ConsolidationChurnMemory),
		DisablePlanning:    !o.ConsolidationPlanning,
		UnderutilizedK:     underutilizedK(o.UnderutilizedConsolidationK),
		CalmAfterScaleDown: offWhenZero(o.CalmAfterScaleDown),
		ReplacementSettle:  offWhenZero(o.ReplacementSettle),
		Solver:             o.solverOptions(),
	}
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
func RepairPolicies(cloud string) []disruptionplan.RepairPolicy {
	out := slices.Clone(disruptionplan.DefaultRepairPolicies)
	switch cloud {
	case CloudProviderAWS:
		out = append(out, disruptionplan.NodeMonitoringAgentPolicies...)
	case CloudProviderSim:
		out = append(out, disruptionplan.SimulatedFaultPolicies...)
	}
	return out
}

// eventRecorder is the recorder the controllers write events with: Karpenter's reporting
// controller name, notes clipped to what the events API stores (it refuses a longer event),
// stored through the core/v1 API with their timestamps (eventkey.CoreV1Sink). Its broadcaster
// runs with the manager, on every replica, and flushes what it holds when the manager stops.
func eventRecorder(cfg *rest.Config, mgr manager.Manager) (events.EventRecorder, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the events client: %w", err)
	}
	b := events.NewBroadcaster(eventkey.CoreV1Sink(cs.CoreV1()))
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
			return fmt.Errorf("starting the event broadcaster: %w", err)
		}
		<-ctx.Done()
		b.Shutdown()
		return nil
	})); err != nil {
		return nil, err
	}
	return eventkey.Clipping(b.NewRecorder(mgr.GetScheme(), "karpenter")), nil
}
