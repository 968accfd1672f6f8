package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/procfs"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"capstan.dev/capstan/config/crd"
	"capstan.dev/capstan/internal/scheme"
)

// KwokNodeAnnotation marks the nodes kwok simulates; the simulated cloud puts it on its nodes.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Options configure a local cluster.
type Options struct {
	// Dir holds the cluster's state: etcd data, certificates, logs and the kubeconfig.
	Dir string
	// AssetsDir holds the binaries (etcd, kube-apiserver, kube-controller-manager,
	// kube-scheduler, kwok) and kwok-stages/.
	AssetsDir string
	// Log receives progress messages.
	Log logr.Logger
	// ControllerManagerQPS is the kube-controller-manager's rate of API requests per second
	// (its --kube-api-qps; the burst is twice it). It bounds how fast a Deployment's pods are
	// created: at Kubernetes' default of 20, a 1,000-pod ReplicaSet takes about 50 s to exist.
	// Zero keeps Kubernetes' default.
	ControllerManagerQPS int
	// NoCRDs starts the API server without Capstan's CRDs, for a test that installs them itself
	// (from the capstan-crd chart).
	NoCRDs bool
	// SchedulerConfig is a KubeSchedulerConfiguration file for the kube-scheduler (--config),
	// e.g. with more profiles; it must name the cluster's kubeconfig (Dir/kubeconfig) in
	// clientConnection.kubeconfig, as the scheduler then ignores its --kubeconfig flag. Empty
	// runs the scheduler's defaults.
	SchedulerConfig string
	// NudgeAfter is how long a pod bound to a kwok node may stay Pending past its ready delay
	// before the cluster nudges it so kwok makes it ready again (NudgedAnnotation). Zero is
	// DefaultNudgeAfter; negative turns nudging off.
	NudgeAfter time.Duration
}

// Cluster is a running local cluster.
type Cluster struct {
	// Config reaches the API server as a cluster administrator.
	Config *rest.Config
	// KubeconfigPath is the administrator kubeconfig written into Options.Dir.
	KubeconfigPath string

	opts  Options
	env   *envtest.Environment
	procs []*process
	// stopNudging ends the nudger's loop; nudged is closed once it has.
	stopNudging context.CancelFunc
	nudged      chan struct{}
}

type process struct {
	name string
	cmd  *exec.Cmd
	// done is closed when the process has exited; err is then its exit error.
	done chan struct{}
	err  error
}

// Start brings the cluster up: the API server with Capstan's CRDs, then the controller manager,
// the scheduler and kwok. On error everything started is stopped again.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	for _, d := range []string{"etcd", "pki", "logs"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("creating cluster directory: %w", err)
		}
	}
	env, cfg, err := startAPIServer(opts)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Config: cfg, KubeconfigPath: filepath.Join(opts.Dir, "kubeconfig"), opts: opts, env: env}
	// A failed start stops what it started.
	if err := os.WriteFile(c.KubeconfigPath, env.KubeConfig, 0o600); err != nil {
		return nil, errors.Join(fmt.Errorf("writing kubeconfig: %w", err), c.Stop())
	}
	if err := c.startComponents(ctx); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	if err := c.startNudging(); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// startNudging starts the loop that nudges pods kwok left Pending (NudgedAnnotation), unless
// Options.NudgeAfter turns it off.
func (c *Cluster) startNudging() error {
	after := c.opts.NudgeAfter
	if after < 0 {
		return nil
	}
	if after == 0 {
		after = DefaultNudgeAfter
	}
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return fmt.Errorf("client for nudging pods: %w", err)
	}
	n := &nudger{client: cs, clock: clock.RealClock{}, after: after, log: c.opts.Log.WithName("nudge")}
	ctx, cancel := context.WithCancel(context.Background())
	c.stopNudging, c.nudged = cancel, make(chan struct{})
	go func() {
		defer close(c.nudged)
		n.run(ctx, min(after/3, 10*time.Second))
	}()
	return nil
}

func (c *Cluster) startComponents(ctx context.Context) error {
	kc := "--kubeconfig=" + c.KubeconfigPath
	kwokArgs := []string{kc,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=" + KwokNodeAnnotation + "=fake",
		"--node-lease-duration-seconds=40",
	}
	stages, err := filepath.Glob(filepath.Join(c.opts.AssetsDir, "kwok-stages", "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("no kwok stage files in %s: rebuild with hack/tools.sh", filepath.Join(c.opts.AssetsDir, "kwok-stages"))
	}
	for _, s := range stages {
		s, err := withReadinessDelay(s, filepath.Join(c.opts.Dir, "kwok-stages"))
		if err != nil {
			return err
		}
		kwokArgs = append(kwokArgs, "--config="+s)
	}
	unhealthy := filepath.Join(c.opts.Dir, "kwok-stages", "pod-unhealthy.yaml")
	if err := os.MkdirAll(filepath.Dir(unhealthy), 0o755); err != nil {
		return fmt.Errorf("writing kwok stage: %w", err)
	}
	if err := os.WriteFile(unhealthy, []byte(unhealthyPodStage), 0o644); err != nil {
		return fmt.Errorf("writing kwok stage: %w", err)
	}
	kwokArgs = append(kwokArgs, "--config="+unhealthy)
	kcmArgs := []string{kc,
		"--authentication-kubeconfig=" + c.KubeconfigPath,
		"--authorization-kubeconfig=" + c.KubeconfigPath,
		"--authentication-skip-lookup=true",
		"--leader-elect=false",
		// No serving port: nothing reads the controller manager's health or metrics, and a
		// port picked as free can be taken before the component binds it.
		"--secure-port=0",
		"--use-service-account-credentials=false",
		"--controllers=*,-serviceaccount-token,-nodeipam,-csrsigning,-csrapproving,-csrcleaner,-bootstrapsigner,-tokencleaner,-persistentvolume-binder,-attachdetach,-persistentvolume-expander,-ephemeral-volume",
		"--cluster-name=capstan-local",
	}
	if q := c.opts.ControllerManagerQPS; q > 0 {
		kcmArgs = append(kcmArgs, fmt.Sprintf("--kube-api-qps=%d", q), fmt.Sprintf("--kube-api-burst=%d", 2*q))
	}
	schedArgs := []string{kc,
		"--authentication-kubeconfig=" + c.KubeconfigPath,
		"--authorization-kubeconfig=" + c.KubeconfigPath,
		"--authentication-skip-lookup=true",
		"--leader-elect=false",
		"--secure-port=0",
	}
	if c.opts.SchedulerConfig != "" {
		schedArgs = append(schedArgs, "--config="+c.opts.SchedulerConfig)
	}
	components := []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", kcmArgs},
		{"kube-scheduler", schedArgs},
		{"kwok", kwokArgs},
	}
	for _, comp := range components {
		c.opts.Log.Info("starting component", "component", comp.name)
		p, err := c.start(ctx, comp.name, comp.args)
		if err != nil {
			return err
		}
		c.procs = append(c.procs, p)
	}
	// A component that dies at once (bad flag, port taken) should fail Start, not a later test.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	for _, p := range c.procs {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start-up (see %s): %v", p.name, filepath.Join(c.opts.Dir, "logs", p.name+".log"), p.err)
		default:
		}
	}
	return nil
}

func (c *Cluster) start(_ context.Context, name string, args []string) (*process, error) {
	out, err := logFile(c.opts.Dir, name)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(c.opts.AssetsDir, name), args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		_ = out.Close()
	}()
	return p, nil
}

// Wait blocks until the context ends or a component exits; it returns the component's error.
func (c *Cluster) Wait(ctx context.Context) error {
	cases := make(chan error, len(c.procs))
	for _, p := range c.procs {
		go func() {
			<-p.done
			cases <- fmt.Errorf("%s exited: %v", p.name, p.err)
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-cases:
		return err
	}
}

// CrashAPIServer kills the kube-apiserver (SIGKILL, as a crash or an OOM kill would) and starts
// it again on the same port, with the same certificates and etcd: every client sees its
// connections drop and its requests fail until it is back. The other components keep running.
func (c *Cluster) CrashAPIServer() error {
	api := c.env.ControlPlane.APIServer
	pid, err := apiServerPID(api.CertDir)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing kube-apiserver %d: %w", pid, err)
	}
	// envtest's Stop finds the process gone and returns; Start runs it again.
	if err := api.Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver: %w", err)
	}
	if err := api.Start(); err != nil {
		return fmt.Errorf("starting kube-apiserver again: %w", err)
	}
	return nil
}

// apiServerPID finds the kube-apiserver serving from certDir (envtest does not say its pid).
func apiServerPID(certDir string) (int, error) {
	procs, err := procfs.AllProcs()
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		args, err := p.CmdLine()
		if err != nil || len(args) == 0 {
			continue
		}
		if filepath.Base(args[0]) == "kube-apiserver" && slices.Contains(args, "--cert-dir="+certDir) {
			return p.PID, nil
		}
	}
	return 0, fmt.Errorf("no kube-apiserver with --cert-dir=%s running", certDir)
}

// Stop stops the components, then the API server and etcd.
func (c *Cluster) Stop() error {
	var errs []error
	if c.stopNudging != nil {
		c.stopNudging()
		<-c.nudged
		c.stopNudging = nil
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.procs = nil
	if err := c.env.Stop(); err != nil {
		errs = append(errs, fmt.Errorf("stopping etcd and kube-apiserver: %w", err))
	}
	return errors.Join(errs...)
}

func logFile(dir, name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "logs", name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log of %s: %w", name, err)
	}
	return f, nil
}

// apiServerAttempts bounds the starts of etcd and kube-apiserver: envtest picks their ports as
// free before they bind them, so another process can take one in between.
const apiServerAttempts = 3

// startAPIServer starts etcd and kube-apiserver with the CRDs, trying again (with new ports)
// when an attempt fails; a failed attempt leaves nothing running.
func startAPIServer(opts Options) (*envtest.Environment, *rest.Config, error) {
	var errs []error
	for attempt := 1; attempt <= apiServerAttempts; attempt++ {
		opts.Log.Info("starting etcd and kube-apiserver", "attempt", attempt)
		env, err := newEnvironment(opts)
		if err != nil {
			return nil, nil, err
		}
		cfg, err := env.Start()
		if err == nil {
			return env, cfg, nil
		}
		// envtest leaves etcd and kube-apiserver running when installing the CRDs fails.
		_ = env.Stop()
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
	}
	return nil, nil, fmt.Errorf("starting etcd and kube-apiserver (logs in %s): %w", filepath.Join(opts.Dir, "logs"), errors.Join(errs...))
}

// newEnvironment describes etcd and kube-apiserver with Capstan's CRDs, logging into opts.Dir.
// Each attempt loads its own CRD objects: envtest fills in the ones it installs.
func newEnvironment(opts Options) (*envtest.Environment, error) {
	s, err := scheme.New()
	if err != nil {
		return nil, err
	}
	var crds []*apiextensionsv1.CustomResourceDefinition
	if !opts.NoCRDs {
		if crds, err = crd.Load(); err != nil {
			return nil, err
		}
	}
	env := &envtest.Environment{BinaryAssetsDirectory: opts.AssetsDir, Scheme: s, CRDs: crds}
	env.ControlPlane.Etcd = &envtest.Etcd{DataDir: filepath.Join(opts.Dir, "etcd")}
	env.ControlPlane.APIServer = &envtest.APIServer{CertDir: filepath.Join(opts.Dir, "pki")}
	if env.ControlPlane.Etcd.Out, err = logFile(opts.Dir, "etcd"); err != nil {
		return nil, err
	}
	env.ControlPlane.Etcd.Err = env.ControlPlane.Etcd.Out
	if env.ControlPlane.APIServer.Out, err = logFile(opts.Dir, "kube-apiserver"); err != nil {
		return nil, err
	}
	env.ControlPlane.APIServer.Err = env.ControlPlane.APIServer.Out
	return env, nil
}

// ReadyDelayAnnotation on a pod delays kwok's making it Running and Ready by a duration ("5s"):
// the annotation kwok's own general pod stages read. Without it a pod is Ready as soon as it is
// bound, which makes a PodDisruptionBudget nearly impossible to break.
const ReadyDelayAnnotation = "pod-ready.stage.kwok.x-k8s.io/delay"

// DeleteDelayAnnotation on a pod delays kwok's removing it once it is deleted by a duration
// ("30s"): what a container's preStop hook and grace period take on a real kubelet. Karpenter's
// end-to-end suites set it on pods with a preStop sleep; without it a deleted pod is gone at once.
const DeleteDelayAnnotation = "pod-delete.stage.kwok.x-k8s.io/delay"

// UnhealthyStageLabel set to "unhealthy" on a pod makes kwok run it and never make it Ready, as a
// kubelet shows a pod whose readiness probe never succeeds (phase Running, Ready False). The label
// and value of the stage Karpenter's CI cluster has for its end-to-end suites.
const UnhealthyStageLabel = "kwok.x-k8s.io/stage"

// unhealthyPodStage is the kwok stage of UnhealthyStageLabel: it takes the pods so labelled
// before kwok's pod-ready stage does (its weight; pod-ready has none), and then pod-ready no
// longer matches them (they are Running).
const unhealthyPodStage = `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-unhealthy
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchLabels:
      ` + UnhealthyStageLabel + `: unhealthy
    matchExpressions:
    - key: .metadata.deletionTimestamp
      operator: DoesNotExist
    - key: .status.phase
      operator: In
      values: [Pending]
  weight: 100
  next:
    statusTemplate: |
      {{ $now := Now }}
      conditions:
      - {type: Initialized, status: "True", lastTransitionTime: {{ $now | Quote }}}
      - {type: ContainersReady, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
      - {type: Ready, status: "False", reason: ContainersNotReady, lastTransitionTime: {{ $now | Quote }}}
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: false
        started: true
        restartCount: 0
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      {{ with NodeIPWith .spec.nodeName }}
      hostIP: {{ . | Quote }}
      {{ end }}
      {{ with PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid "" ) ( or .metadata.name "" ) ( or .metadata.namespace "" ) }}
      podIP: {{ . | Quote }}
      {{ end }}
      phase: Running
      startTime: {{ $now | Quote }}
`

// stageDelays are the stages given a delay read from an annotation, by stage name.
var stageDelays = map[string]string{"pod-ready": ReadyDelayAnnotation, "pod-delete": DeleteDelayAnnotation}

// withReadinessDelay returns the stage file to give kwok for path: kwok's pod-ready and
// pod-delete stages with a delay read from ReadyDelayAnnotation and DeleteDelayAnnotation (none
// without it), written into dir; any other file as is.
func withReadinessDelay(path, dir string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading kwok stage %s: %w", path, err)
	}
	stage := map[string]any{}
	if err := yaml.Unmarshal(data, &stage); err != nil {
		return "", fmt.Errorf("reading kwok stage %s: %w", path, err)
	}
	meta, _ := stage["metadata"].(map[string]any)
	spec, _ := stage["spec"].(map[string]any)
	name, _ := meta["name"].(string)
	annotation, ok := stageDelays[name]
	if !ok || spec == nil || spec["delay"] != nil {
		return path, nil
	}
	spec["delay"] = map[string]any{
		"durationMilliseconds": 0,
		"durationFrom":         map[string]any{"expressionFrom": `.metadata.annotations["` + annotation + `"]`},
	}
	out, err := yaml.Marshal(stage)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("writing kwok stage: %w", err)
	}
	to := filepath.Join(dir, filepath.Base(path))
	if err := os.WriteFile(to, out, 0o644); err != nil {
		return "", fmt.Errorf("writing kwok stage: %w", err)
	}
	return to, nil
}
