// Command kube-scheduler is the real Kubernetes scheduler, built from k8s.io/kubernetes for
// Capstan's local control plane.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
