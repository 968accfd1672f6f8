package localcluster_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/go-logr/logr/testr"
	"k8s.io/client-go/kubernetes"

	"capstan.dev/capstan/internal/localcluster"
	"capstan.dev/capstan/internal/testenv"
)

func assets(t *testing.T) string {
	t.Helper()
	dir, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// children lists the processes whose parent is this test process.
func children(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(s[i+1:])
		if len(fields) > 1 && fields[1] == self && fields[0] != "Z" {
			out = append(out, s[:i+1])
		}
	}
	return out
}

func TestStartsAndStopsRepeatedly(t *testing.T) {
	dir := assets(t)
	for i := range 3 {
		c, err := localcluster.Start(t.Context(), localcluster.Options{Dir: t.TempDir(), AssetsDir: dir, Log: testr.New(t)})
		if err != nil {
			t.Fatalf("start %d: %v", i+1, err)
		}
		cs, err := kubernetes.NewForConfig(c.Config)
		if err != nil {
			t.Fatal(err)
		}
		if body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(t.Context()); err != nil || string(body) != "ok" {
			t.Errorf("start %d: GET /readyz = %q, %v", i+1, body, err)
		}
		if err := c.Stop(); err != nil {
			t.Fatalf("stop %d: %v", i+1, err)
		}
		if left := children(t); len(left) > 0 {
			t.Fatalf("stop %d left processes running: %v", i+1, left)
		}
	}
}

// A component that dies at start-up fails Start with its name, and nothing is left running.
func TestAFailedComponentStopsEverythingStarted(t *testing.T) {
	real := assets(t)
	broken := t.TempDir()
	entries, err := os.ReadDir(real)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "kube-scheduler" {
			continue
		}
		target, err := filepath.EvalSymlinks(filepath.Join(real, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(broken, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	script := "#!/bin/sh\necho 'bind: address already in use' >&2\nexit 1\n"
	if err := os.WriteFile(filepath.Join(broken, "kube-scheduler"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := localcluster.Start(t.Context(), localcluster.Options{Dir: t.TempDir(), AssetsDir: broken, Log: testr.New(t)})
	if err == nil {
		_ = c.Stop()
		t.Fatal("Start succeeded with a kube-scheduler that exits at once")
	}
	if !strings.Contains(err.Error(), "kube-scheduler exited at start-up") {
		t.Errorf("error does not name the failed component: %v", err)
	}
	if left := children(t); len(left) > 0 {
		t.Errorf("a failed start left processes running: %v", left)
	}
}
