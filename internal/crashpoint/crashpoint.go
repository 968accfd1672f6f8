// Package crashpoint kills the process at named points of its work, for the chaos suite
// (test/chaos): with CAPSTAN_CRASH_AT=point:n the process SIGKILLs itself the n-th time it
// reaches point — no deferred work, no flushed write, as a node failure or an OOM kill would
// leave it. Unset (production), Hit costs one comparison.
package crashpoint

import (
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Points Capstan reaches.
const (
	// LaunchCreated is a launch the cloud has answered whose result is not yet written to the
	// NodeClaim's status.
	LaunchCreated = "launch-created"
	// ClaimsCreated is a provisioning pass that has created its NodeClaims and not yet told the
	// pods or logged.
	ClaimsCreated = "claims-created"
	// DisruptionRecorded is a disruption command recorded on its candidates' NodeClaims whose
	// nodes are not yet tainted.
	DisruptionRecorded = "disruption-recorded"
	// DisruptionTainted is a command whose candidates' nodes are tainted and whose replacements
	// are not yet created.
	DisruptionTainted = "disruption-tainted"
	// ReplacementsCreated is a command whose replacements are created, before it waits for them.
	ReplacementsCreated = "replacements-created"
	// CandidateDeleted is a command that has deleted one of its candidates' NodeClaims and not
	// yet the others or marked itself done.
	CandidateDeleted = "candidate-deleted"
	// InstanceDeleted is a terminating NodeClaim whose machine the cloud has been told to delete,
	// before its node and finalizers are removed.
	InstanceDeleted = "instance-deleted"
)

// EnvVar is the variable naming the point and count.
const EnvVar = "CAPSTAN_CRASH_AT"

var (
	point string
	at    int64
	seen  atomic.Int64
)

func init() {
	p, n, ok := strings.Cut(os.Getenv(EnvVar), ":")
	if !ok {
		return
	}
	if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > 0 {
		point, at = p, v
	}
}

// Hit marks that the process reached p; the configured n-th hit of the configured point kills it.
func Hit(p string) {
	if point == "" || p != point {
		return
	}
	if seen.Add(1) == at {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
