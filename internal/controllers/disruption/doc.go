// Package disruption carries out voluntary disruption: each round it builds a snapshot of the
// cluster from the cache, asks the decision core (internal/disruptionplan) for a command, waits a
// validation period and checks the command again against a fresh snapshot, then taints the
// candidates karpenter.sh/disrupted:NoSchedule, launches the replacements, waits until they are
// initialized, and deletes the candidates' NodeClaims, which the termination controller drains.
// A command's state lives on the candidates' NodeClaims (the capstan.dev/disruption-command
// annotation names the command and its replacements), so a restart finishes a command whose
// replacements exist and rolls back one whose replacements do not; a node tainted by a command
// that no longer exists is un-tainted. Candidates not disrupted get an event naming the reason,
// once per reason change. See docs/disruption.md.
package disruption
