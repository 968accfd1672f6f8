// Package e2e runs end-to-end tests on the local cluster that `make cluster-up` starts: a real
// kube-apiserver, controller manager and scheduler, with kwok simulating nodes and their pods.
// Its Harness is what the end-to-end packages (test/e2e/autoscaling on the simulated cloud,
// test/e2e/aws on the local AWS endpoints) run on: the cluster, capstan built from this module
// and run as a process with its log, waits, and what a failure dumps.
package e2e
