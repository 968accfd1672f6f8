// Package sim is Capstan's simulated cloud: a CloudProvider whose machines are records in memory
// (optionally persisted to a file, so that a restarted controller finds them), priced from the
// embedded EC2 catalog, launched and registered after delays on an injected clock, with injected
// failures (insufficient capacity, launch errors, machines that never register). A registered
// machine joins the cluster by creating its Node — labels, taints, capacity, the
// karpenter.sh/unregistered taint and the kwok.x-k8s.io/node annotation — so kwok makes it Ready
// and runs its pods.
package sim
