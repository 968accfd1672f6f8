// Package provisioning turns pods the scheduler could not place into NodeClaims. Pod events
// trigger it; it waits for the batch to settle (an idle window, bounded by a maximum), reads the
// cluster — NodePools and their instance types, nodes, in-flight NodeClaims, bound pods,
// DaemonSets — asks the solver where the pods go, and creates the NodeClaims of the plan, owned by
// their NodePool. Pods that fit in-flight capacity cause no new NodeClaim; pods that fit nowhere
// get an event with the solver's reason. NodePool limits are hard: a NodeClaim reserves the
// largest capacity it may launch as, and the solver never plans past what is left.
package provisioning
