// Command capstan is the Capstan node autoscaler.
package main

import (
	"fmt"
	"os"
	"runtime/debug"

	// Mozilla's root certificates, used when the system has none (the container image has no
	// CA bundle: internal/imagebuild).
	_ "golang.org/x/crypto/x509roots/fallback"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"

	"capstan.dev/capstan/internal/operator"
)

// version is set at build time with -ldflags "-X main.version=…"; otherwise the module version.
var version = ""

func main() {
	os.Exit(run())
}

func run() int {
	opts, err := operator.Parse(os.Args[1:], operator.Environ)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "capstan:", err)
		fmt.Fprintln(os.Stderr, "capstan: see capstan --help")
		return 2
	case opts.Help:
		operator.Usage(os.Stdout)
		return 0
	case opts.Version:
		v, commit := buildVersion()
		fmt.Println("capstan", v, commit)
		return 0
	}
	opts.BuildVersion, opts.BuildCommit = buildVersion()
	logger, err := operator.NewLogger(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, "capstan:", err)
		return 2
	}
	// Named as Karpenter's, so that log queries written for it keep matching.
	log := logger.WithName("controller")
	ctrl.SetLogger(log)
	operator.RedirectKlog(log)
	cfg, err := operator.RESTConfig(opts, operator.Environ)
	if err != nil {
		log.Error(err, "finding the API server")
		return 1
	}
	op, err := operator.New(cfg, opts, clock.RealClock{}, log)
	if err != nil {
		log.Error(err, "starting capstan")
		return 1
	}
	log.Info("starting capstan", "version", opts.BuildVersion, "commit", opts.BuildCommit, "cluster-name", opts.ClusterName, "cloud-provider", opts.CloudProvider)
	if err := op.Manager.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "capstan stopped")
		return 1
	}
	return 0
}

// buildVersion is the version (set by -ldflags, else the module's) and the VCS commit.
func buildVersion() (string, string) {
	v, commit := version, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				commit = s.Value
			}
		}
	}
	if v == "" {
		v = "unknown"
	}
	return v, commit
}
