// Command kube-apiserver is the real Kubernetes API server, built from k8s.io/kubernetes for
// Capstan's local control plane and tests.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
