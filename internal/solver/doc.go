// Package solver decides where pending pods go: onto existing nodes, onto new NodeClaims it plans
// (a NodePool, narrowed requirements and a price-ordered set of candidate instance types), or
// nowhere, with a reason a person can act on. It is a pure function of its Input — no API server,
// no cloud — so provisioning, consolidation and what-if simulation share it.
//
// Semantics follow kube-scheduler and Karpenter's documentation: node selectors and required
// node affinity (ORed terms tried in order), tolerations, topology spread constraints (maxSkew,
// minDomains, matchLabelKeys, node affinity and taint policies), required pod affinity and
// anti-affinity on any topology key (with the symmetry of existing pods' anti-affinity), host
// ports, resource requests (init containers, sidecars, pod overhead, extended resources, the pod
// count), NodePool weights, hard limits and minValues. Preferences (preferred node and pod
// affinity, ScheduleAnyway spreads, PreferNoSchedule taints) are honoured first and relaxed one
// at a time, lowest weight first, only when a pod cannot be placed otherwise.
//
// Speed comes from deciding per pod class rather than per pod: pods with the same scheduling
// constraints and requests share their requirement sets, the NodePools and instance types they
// are compatible with, and their topology groups, so the per-pod work is a few vector comparisons
// and counter updates. Quality comes from first-fit-decreasing packing into NodeClaims that keep
// every instance type still able to hold their pods, then buying the cheapest of them.
package solver
