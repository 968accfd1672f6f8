// Package e2e runs end-to-end tests on the local cluster that `make cluster-up` starts: a real
// kube-apiserver, controller manager and scheduler, with kwok simulating nodes and their pods.
package e2e
