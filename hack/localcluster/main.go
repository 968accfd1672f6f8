// Command localcluster runs Capstan's local cluster in the foreground until interrupted: etcd,
// kube-apiserver with Capstan's CRDs, kube-controller-manager, kube-scheduler and kwok, on
// loopback. hack/cluster.sh starts it in the background for `make cluster-up`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"capstan.dev/capstan/internal/localcluster"
)

func main() {
	os.Exit(run())
}

func run() int {
	dir := flag.String("dir", ".capstan", "directory for the cluster's state, logs and kubeconfig")
	assets := flag.String("assets", "bin", "directory of the control-plane binaries (hack/tools.sh)")
	kcmQPS := flag.Int("kcm-qps", 0, "the kube-controller-manager's API requests per second (its burst is twice it); 0 keeps Kubernetes' default of 20, which bounds how fast a Deployment's pods are created")
	schedulerConfig := flag.String("scheduler-config", "", "a KubeSchedulerConfiguration file for the kube-scheduler (its clientConnection.kubeconfig must be DIR/kubeconfig); empty runs its defaults")
	flag.Parse()
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, "[cluster]", prefix, args) }, funcr.Options{})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	absDir, err := filepath.Abs(*dir)
	if err != nil {
		return fail(log, err)
	}
	absAssets, err := filepath.Abs(*assets)
	if err != nil {
		return fail(log, err)
	}
	if *kcmQPS < 0 {
		return fail(log, fmt.Errorf("--kcm-qps=%d: must be 0 (Kubernetes' default) or more", *kcmQPS))
	}
	c, err := localcluster.Start(ctx, localcluster.Options{Dir: absDir, AssetsDir: absAssets, Log: log, ControllerManagerQPS: *kcmQPS, SchedulerConfig: *schedulerConfig})
	if err != nil {
		return fail(log, err)
	}
	ready := filepath.Join(absDir, "ready")
	if err := os.WriteFile(ready, []byte(c.Config.Host+"\n"), 0o644); err != nil {
		_ = c.Stop()
		return fail(log, err)
	}
	log.Info("cluster is up", "server", c.Config.Host, "kubeconfig", c.KubeconfigPath)
	waitErr := c.Wait(ctx)
	_ = os.Remove(ready)
	log.Info("stopping cluster")
	if err := c.Stop(); err != nil {
		return fail(log, err)
	}
	if waitErr != nil {
		return fail(log, waitErr)
	}
	return 0
}

func fail(log logr.Logger, err error) int {
	log.Error(err, "local cluster failed")
	return 1
}
