package amifamily

// These tests reach the families' builders below UserData's check of labels and taints, so that
// the quoting itself is shown to hold for any value: a NodeClaim stored before the CRDs refused
// such values, or a value that gets past both checks, still runs no code.

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/test/awsfake"
)

// hostile are values that would run code if pasted unquoted or single-quoted naively into
// bash or PowerShell.
var hostile = []string{
	"x';touch CANARY;'",
	"$(touch CANARY)",
	"`touch CANARY`",
	"a\ntouch CANARY",
	`"; touch CANARY; "`,
	`\'$(touch CANARY)\'`,
	"x' ; touch CANARY ; echo '",
	"x\u2019;New-Item CANARY;\u2018",
	"${IFS}touch${IFS}CANARY",
	"a b --pod-manifest-path=/tmp",
	"*",
	"{a,b}",
	"~root",
}

// quotingBootstrap is a Bootstrap whose cluster, label value and taint value are v.
func quotingBootstrap(cluster, endpoint, ca, label, taintKey, taintValue string) Bootstrap {
	return Bootstrap{ClusterName: cluster, Endpoint: endpoint, CABundle: ca,
		Labels:  map[string]string{"team": label},
		Taints:  []corev1.Taint{{Key: taintKey, Value: taintValue, Effect: corev1.TaintEffectNoSchedule}},
		Kubelet: &awsv1.KubeletConfiguration{ClusterDNS: []string{"10.0.0.10"}, MaxPods: new(int32(42))}}
}

// wantAL2Commands are the commands the AL2 script must parse into, written out here rather than
// with the builder's own helpers.
func wantAL2Commands(cluster, endpoint, ca, label, taintKey, taintValue string) [][]string {
	call := []string{"/etc/eks/bootstrap.sh", cluster, "--apiserver-endpoint", endpoint}
	if ca != "" {
		call = append(call, "--b64-cluster-ca", ca)
	}
	call = append(call, "--dns-cluster-ip", "10.0.0.10", "--use-max-pods", "false", "--kubelet-extra-args",
		"--node-labels=team="+label+" --register-with-taints="+taintKey+"="+taintValue+":NoSchedule --max-pods=42")
	return [][]string{{"exec"}, {"tee", "/var/log/user-data.log"}, {"logger", "-t", "user-data", "-s"}, call}
}

// FuzzAL2Quoting: for any cluster, endpoint, CA bundle, label value, taint key and taint value,
// the AL2 bootstrap script parses (mvdan.cc/sh's bash parser) into exactly the expected commands —
// nothing added, nothing expanded at run time — and the bootstrap.sh call's words give back the
// values. Only a NUL byte, which no bash word holds, is refused, with an error.
func FuzzAL2Quoting(f *testing.F) {
	f.Add("prod", "https://kube:6443", "Q0E=", "capstan", "gpu", "true")
	for _, h := range hostile {
		f.Add(h, h, "", h, h, h)
	}
	f.Add("a\x00b", "e", "", "l", "k", "v")
	f.Add("\xff", "if", "then", "!", "#", "'")
	f.Fuzz(func(t *testing.T, cluster, endpoint, ca, label, taintKey, taintValue string) {
		script, err := al2Bootstrap(quotingBootstrap(cluster, endpoint, ca, label, taintKey, taintValue))
		if err != nil {
			if !strings.Contains(cluster+endpoint+ca+label+taintKey+taintValue, "\x00") {
				t.Fatalf("refused values without a NUL byte: %v", err)
			}
			return
		}
		got, err := awsfake.ShellCommands(script)
		if err != nil {
			t.Fatalf("%v\n%s", err, script)
		}
		if want := wantAL2Commands(cluster, endpoint, ca, label, taintKey, taintValue); !slices.EqualFunc(got, want, slices.Equal) {
			t.Fatalf("commands %q, want %q\n%s", got, want, script)
		}
	})
}

// TestAL2ScriptRunsNoInjectedCode runs the AL2 bootstrap script in bash, with bootstrap.sh, tee
// and logger stubbed as functions, for each hostile value as the cluster name, a label value and
// a taint value: nothing creates the canary file, and bootstrap.sh receives the values intact.
func TestAL2ScriptRunsNoInjectedCode(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is not on PATH: %v", err)
	}
	for _, v := range hostile {
		dir := t.TempDir()
		script, err := al2Bootstrap(quotingBootstrap(v, "https://kube:6443", "Q0E=", v, "gpu", v))
		if err != nil {
			t.Fatal(err)
		}
		stubs := `/etc/eks/bootstrap.sh() { printf '%s\0' "$@" > "$ARGS"; }
tee() { cat > /dev/null; }
logger() { cat > /dev/null; }
`
		cmd := exec.Command(bash, "-c", stubs+script)
		cmd.Dir = dir
		cmd.Env = []string{"ARGS=" + filepath.Join(dir, "args"), "PATH=/usr/bin:/bin"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%q: the script failed: %v\n%s\n%s", v, err, out, script)
		}
		// The script's own output goes to the stubbed tee, so only files tell what ran.
		if _, err := os.Stat(filepath.Join(dir, "CANARY")); err == nil {
			t.Fatalf("%q: the script ran injected code\n%s", v, script)
		}
		raw, err := os.ReadFile(filepath.Join(dir, "args"))
		if err != nil {
			t.Fatalf("%q: bootstrap.sh was not called: %v\n%s", v, err, script)
		}
		got := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
		want := wantAL2Commands(v, "https://kube:6443", "Q0E=", v, "gpu", v)[3][1:]
		if !slices.Equal(got, want) {
			t.Fatalf("%q: bootstrap.sh got %q, want %q", v, got, want)
		}
	}
}

// FuzzPowerShellQuoting: psQuote's string, read as PowerShell's language specification reads a
// verbatim string (awsfake.PowerShellString), gives back the value and ends where it should.
func FuzzPowerShellQuoting(f *testing.F) {
	for _, h := range hostile {
		f.Add(h)
	}
	f.Add("''\u2018\u2019\u201a\u201b'")
	f.Fuzz(func(t *testing.T, s string) {
		v, rest, err := awsfake.PowerShellString(psQuote(s) + " -Next 'n'")
		if err != nil || v != s || rest != " -Next 'n'" {
			t.Fatalf("%q quoted as %s reads back as %q (rest %q, %v)", s, psQuote(s), v, rest, err)
		}
	})
}

// TestWindowsCallTakesEachValueWhole builds Windows user data with each hostile value as the
// cluster name, a label value and a taint value, and reads the bootstrap call's arguments back:
// every parameter gets its whole value and nothing follows the last one.
func TestWindowsCallTakesEachValueWhole(t *testing.T) {
	for _, v := range hostile {
		ud, err := windows(quotingBootstrap(v, "https://kube:6443", "Q0E=", v, "gpu", v))
		if err != nil {
			t.Fatal(err)
		}
		_, call, ok := strings.Cut(ud, "& $EKSBootstrapScriptFile")
		if !ok {
			t.Fatalf("no bootstrap call:\n%s", ud)
		}
		got := map[string]string{}
		for call != "\n</powershell>" {
			name, rest, ok := strings.Cut(strings.TrimPrefix(call, " "), " ")
			if !ok || !strings.HasPrefix(name, "-") {
				t.Fatalf("%q: the call goes on with %q, not a parameter:\n%s", v, call, ud)
			}
			if got[name], call, err = awsfake.PowerShellString(rest); err != nil {
				t.Fatalf("%q: %s's argument: %v\n%s", v, name, err, ud)
			}
		}
		want := map[string]string{"-EKSClusterName": v, "-APIServerEndpoint": "https://kube:6443", "-Base64ClusterCA": "Q0E=",
			"-KubeletExtraArgs": "--node-labels=team=" + v + " --register-with-taints=gpu=" + v + ":NoSchedule --max-pods=42",
			"-DNSClusterIP":     "10.0.0.10"}
		if len(got) != len(want) {
			t.Fatalf("%q: parameters %q, want %q", v, got, want)
		}
		for k := range want {
			if got[k] != want[k] {
				t.Fatalf("%q: %s is %q, want %q", v, k, got[k], want[k])
			}
		}
	}
}

// TestWindowsRefusesAPowerShellTag: a value holding a <powershell> tag, which would end the block
// EC2Launch runs, is refused rather than quoted.
func TestWindowsRefusesAPowerShellTag(t *testing.T) {
	for _, v := range []string{"</powershell>", "x</PowerShell><powershell>New-Item CANARY"} {
		if _, err := windows(quotingBootstrap(v, "https://kube:6443", "", "l", "k", "v")); err == nil || !strings.Contains(err.Error(), "<powershell> tag") {
			t.Fatalf("%q: got %v, want a refusal naming the tag", v, err)
		}
	}
}
