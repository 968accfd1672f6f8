// Package localcluster runs a whole Kubernetes control plane on loopback from the binaries
// hack/tools.sh builds: etcd and kube-apiserver (through envtest, which also makes the
// certificates and an administrator kubeconfig), kube-controller-manager, kube-scheduler, and kwok,
// which makes nodes annotated kwok.x-k8s.io/node=fake Ready and runs their pods. `make cluster-up`
// and the end-to-end tests use it.
package localcluster
