// Package makerun tests `make run` as a user runs it: it starts Capstan on a local cluster, and
// whatever stops it leaves no process and no state behind.
package makerun

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}

// processesOf lists the processes whose command line names dir (the state directory each run
// gets its own of: Capstan's kubeconfig, the cluster's components).
func processesOf(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if cmd := strings.ReplaceAll(string(cmdline), "\x00", " "); strings.Contains(cmd, dir) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

// output is what make run prints, safe to read while it runs.
type output struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// startRun starts `make run` (with the variables given) in its own process group, on free ports
// and a state directory of its own, and returns once Capstan answers its health probe: the
// command, what it prints and its end.
func startRun(t *testing.T, root, state string, vars ...string) (*exec.Cmd, *output, chan error) {
	t.Helper()
	health := freePort(t)
	cmd := exec.Command("make", append([]string{"--no-print-directory", "run"}, vars...)...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CAPSTAN_STATE_DIR="+state, fmt.Sprintf("METRICS_PORT=%d", freePort(t)),
		fmt.Sprintf("HEALTH_PROBE_PORT=%d", health), fmt.Sprintf("AWS_FAKE_PORT=%d", freePort(t)))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &output{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	up := false
	for deadline := time.Now().Add(5 * time.Minute); !up && time.Now().Before(deadline); time.Sleep(time.Second) {
		select {
		case err := <-done:
			t.Fatalf("make run ended before Capstan was up (%v):\n%s", err, out.String())
		default:
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", health))
		if err == nil {
			_ = resp.Body.Close()
			up = resp.StatusCode == http.StatusOK
		}
	}
	if !up {
		t.Fatalf("Capstan was not up within 5 minutes:\n%s", out.String())
	}
	return cmd, out, done
}

// TestMakeRunStopsEverythingItStarted runs `make run` and stops it as a user would: SIGTERM to
// make (a `kill`), SIGHUP to its process group (the terminal closed), SIGINT to the group
// (Ctrl-C). Each time Capstan, the cluster and the state directory are gone afterwards.
func TestMakeRunStopsEverythingItStarted(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// A signal ignored here (a run under nohup, or started in the background of a script) stays
	// ignored in every child, and `make run` could not be stopped by it as a terminal stops it.
	// Caught here, the signals are reset to their default in the children, as in a terminal.
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGHUP, syscall.SIGINT)
	defer signal.Stop(caught)
	for _, tc := range []struct {
		name  string
		group bool
		sig   syscall.Signal
	}{
		{"SIGTERM to make", false, syscall.SIGTERM},
		{"SIGHUP to the group", true, syscall.SIGHUP},
		{"SIGINT to the group", true, syscall.SIGINT},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			cmd, out, done := startRun(t, root, state)
			if left := processesOf(t, state); len(left) == 0 {
				t.Fatalf("no process names the state directory %s while Capstan runs: the check below would prove nothing", state)
			}
			pid := cmd.Process.Pid
			if tc.group {
				pid = -pid
			}
			if err := syscall.Kill(pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-done:
			case <-time.After(2 * time.Minute):
				t.Fatalf("make run still running 2 minutes after %s:\n%s", tc.name, out.String())
			}
			// The cluster's components are stopped by `down` before the script exits; a process
			// may still be on its way out for a moment.
			var left []string
			for range 20 {
				if left = processesOf(t, state); len(left) == 0 {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			if len(left) > 0 {
				t.Errorf("after %s, processes left: %v", tc.name, left)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Errorf("after %s, the state directory %s is still there (%v)", tc.name, state, err)
			}
		})
	}
}

// printedLines are the command lines `make run` prints for the other terminal: the indented
// lines after the one that says "In another terminal".
func printedLines(out string) []string {
	var lines []string
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(l, "In another terminal"):
			in = true
		case in && strings.HasPrefix(l, "  "):
			lines = append(lines, strings.TrimSpace(l))
		case in && len(lines) > 0 && strings.TrimSpace(l) != "":
			return lines
		}
	}
	return lines
}

// TestMakeRunOnAWSPrintsADrillThatRuns runs `make run CLOUD=aws` and then the lines it prints
// for another terminal, exactly as printed, in one bash from the repository's root: the AWS CLI,
// the plugin with --cluster-name, the Spot drill and the dead-letter drill. Each line succeeds
// and shows what docs/aws.md says it shows; then make run stops on SIGTERM.
func TestMakeRunOnAWSPrintsADrillThatRuns(t *testing.T) {
	if _, err := exec.LookPath("aws"); err != nil {
		t.Fatal("the aws CLI is not installed: run hack/ensure-awscli.sh (make test does)")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGHUP, syscall.SIGINT)
	defer signal.Stop(caught)
	state := filepath.Join(t.TempDir(), "state")
	cmd, out, done := startRun(t, root, state, "CLOUD=aws")
	lines := printedLines(out.String())
	if len(lines) < 10 || !strings.HasPrefix(lines[0], "export KUBECONFIG=") {
		t.Fatalf("make run CLOUD=aws printed no drill to run:\n%s", out.String())
	}
	sh := exec.CommandContext(t.Context(), "bash", "-c", "set -euo pipefail\n"+strings.Join(lines, "\n"))
	sh.Dir = root
	got, err := sh.CombinedOutput()
	if err != nil {
		t.Fatalf("the printed lines failed (%v):\n%s\n\noutput:\n%s\n\nmake run:\n%s", err, strings.Join(lines, "\n"), got, out.String())
	}
	for _, want := range []string{
		"orders", // kubectl get ec2nodeclass orders
		`deployment "orders-worker" successfully rolled out`,
		"instance type(s) admitted; cheapest: ", // the plugin, with --cluster-name
		`deployment "spot-drill-worker" successfully rolled out`,
		"sent a Spot interruption warning for i-",
		"the API server refuses to delete NodeClaim orders-",
		"received 1 time(s) and not deleted",
		"is in the dead-letter queue " + "capstan-local-dlq",
		`"RedrivePolicy"`,
		`capstan-local-dlq\",\"maxReceiveCount\":3`, // the queue's redrive policy, through the AWS CLI
		`AWS Health Event`,                          // the dead-lettered message, as the control endpoint lists it
	} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the printed lines' output lacks %q:\n%s", want, got)
		}
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("make run CLOUD=aws still running 2 minutes after SIGTERM:\n%s", out.String())
	}
	if left := processesOf(t, state); len(left) > 0 {
		time.Sleep(5 * time.Second)
		if left = processesOf(t, state); len(left) > 0 {
			t.Errorf("after SIGTERM, processes left: %v", left)
		}
	}
}
