package crashpoint

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// The test binary runs itself with CAPSTAN_CRASH_AT set and hits the point three times: it must
// die of SIGKILL at the configured hit and not before (or, configured for a fourth, not at all).
func TestHitKillsAtTheNthHit(t *testing.T) {
	if os.Getenv("CRASHPOINT_CHILD") != "" {
		for range 3 {
			Hit(ClaimsCreated)
			Hit(LaunchCreated)
			os.Stdout.WriteString("hit\n")
		}
		os.Exit(0)
	}
	for _, c := range []struct {
		at     string
		killed bool
		hits   int
	}{{"launch-created:2", true, 1}, {"claims-created:1", true, 0}, {"launch-created:4", false, 3}, {"", false, 3}} {
		cmd := exec.Command(os.Args[0], "-test.run=TestHitKillsAtTheNthHit")
		cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", EnvVar+"="+c.at)
		out, err := cmd.Output()
		var ee *exec.ExitError
		killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
		if killed != c.killed || len(out) != c.hits*len("hit\n") {
			t.Errorf("%s=%q: killed %v after %q (err %v), want killed %v after %d hits", EnvVar, c.at, killed, out, err, c.killed, c.hits)
		}
	}
}
