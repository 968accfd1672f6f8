// Package termination takes a deleted NodeClaim's machine away cleanly: it taints the Node
// karpenter.sh/disrupted, evicts its pods through the Eviction API in order (non-critical before
// critical, DaemonSet pods last) honouring PodDisruptionBudgets and karpenter.sh/do-not-disrupt
// until the claim's terminationGracePeriod forces them out, then deletes the machine, waits for it
// to be gone, and removes the Node and the finalizers. Deleting the Node deletes its NodeClaim.
package termination
