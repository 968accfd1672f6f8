// Command capstan is the Capstan node autoscaler.
package main

import (
	"fmt"
	"os"

	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"capstan.dev/capstan/internal/operator"
)

func main() {
	os.Exit(run())
}

func run() int {
	opts, err := operator.Parse(os.Args[1:], operator.Environ)
	if err != nil {
		fmt.Fprintln(os.Stderr, "capstan:", err)
		return 2
	}
	// Named as Karpenter's, so that log queries written for it keep matching.
	log := operator.NewLogger(opts.LogLevel).WithName("controller")
	ctrl.SetLogger(log)
	cfg, err := operator.RESTConfig(opts)
	if err != nil {
		log.Error(err, "finding the API server")
		return 1
	}
	op, err := operator.New(cfg, opts, clock.RealClock{}, log)
	if err != nil {
		log.Error(err, "starting capstan")
		return 1
	}
	log.Info("starting capstan", "cluster-name", opts.ClusterName, "cloud-provider", opts.CloudProvider)
	if err := op.Manager.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "capstan stopped")
		return 1
	}
	return 0
}
