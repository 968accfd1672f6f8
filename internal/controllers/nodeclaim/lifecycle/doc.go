// Package lifecycle takes a NodeClaim from creation to Ready: it launches the machine
// (Launched), adopts the Node that registers with the machine's provider ID (Registered), waits
// for it to be ready with its startup taints gone and requested resources present (Initialized),
// and marks the claim Ready. A claim whose machine cannot be launched for lack of capacity, or
// never registers within the TTL, is deleted so that provisioning plans again.
package lifecycle
