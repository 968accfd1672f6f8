// Package disruptionplan decides which machines to give back: it is a pure function of a cluster
// snapshot (NodePools with budgets and prices, nodes with their NodeClaims and pods, pending pods,
// PodDisruptionBudgets, the time) that returns one command — delete these NodeClaims, after
// launching these replacements — or nothing, and for every candidate it did not disrupt, the
// reason. It makes no API calls: the disruption controller builds the snapshot from its cache and
// carries the command out, and the what-if tools call the same function on recorded or made-up
// clusters. The rules, with worked examples, are in docs/disruption.md.
package disruptionplan
