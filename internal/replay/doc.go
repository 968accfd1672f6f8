// Package replay plays a workload trace through Capstan's solver and disruption decision core on
// a simulated clock, without an API server: deployments scale up and down as the trace says,
// pending pods are placed as the kube-scheduler and the provisioner would (existing room first,
// new machines after a launch delay), and disruption rounds decide, validate and carry out
// commands (replacements first, evicted pods recreated pending). It reports what the cluster cost,
// how many pods were evicted and how long pods waited. Benchmarks and the no-churn test use it;
// the what-if tools will grow from it.
package replay
