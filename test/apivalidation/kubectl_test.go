package apivalidation

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// kubectl runs kubectl against the test API server and returns its standard output.
func kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not on PATH; it is part of the development set-up (README): %v", err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, env.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, append([]string{"--kubeconfig", kc}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), &kubectlError{err: err, stderr: stderr.String()}
	}
	return string(out), nil
}

type kubectlError struct {
	err    error
	stderr string
}

func (e *kubectlError) Error() string { return e.err.Error() + ": " + e.stderr }

func TestRunbookManifestsApplyAndPrint(t *testing.T) {
	manifest := filepath.Join("testdata", "runbook.yaml")
	if out, err := kubectl(t, "apply", "--dry-run=server", "-f", manifest); err != nil {
		t.Fatalf("server dry run: %v\n%s", err, out)
	}
	if out, err := kubectl(t, "apply", "-f", manifest); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := kubectl(t, "delete", "--ignore-not-found", "-f", manifest); err != nil {
			t.Errorf("delete: %v\n%s", err, out)
		}
	})

	nc := object(t, baseNodeClaim, `
metadata:
  labels:
    karpenter.sh/nodepool: orders
    node.kubernetes.io/instance-type: m5.large
    karpenter.sh/capacity-type: on-demand
    topology.kubernetes.io/zone: us-east-1a
spec: {nodeClassRef: {name: orders}}`, "orders-x7k2p")
	create(t, nc)
	status := map[string]any{
		"providerID": "aws:///us-east-1a/i-0123456789abcdef0",
		"imageID":    "ami-0123456789abcdef0",
		"nodeName":   "ip-10-0-1-23.ec2.internal",
		"conditions": []any{
			map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": "2026-11-30T10:00:00Z"},
			map[string]any{"type": "Drifted", "status": "True", "reason": "NodePoolDrifted", "message": "", "lastTransitionTime": "2026-11-30T10:00:00Z"},
		},
	}
	if err := unstructured.SetNestedMap(nc.Object, status, "status"); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Update(t.Context(), nc); err != nil {
		t.Fatalf("updating status: %v", err)
	}

	tests := []struct {
		args     []string
		header   []string
		rowParts []string
	}{
		{[]string{"get", "nodeclaims"}, []string{"NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE"},
			[]string{"orders-x7k2p", "m5.large", "on-demand", "us-east-1a", "ip-10-0-1-23.ec2.internal", "True"}},
		{[]string{"get", "nodeclaims", "-o", "wide"}, []string{"NAME", "TYPE", "CAPACITY", "ZONE", "NODE", "READY", "AGE", "IMAGEID", "ID", "NODEPOOL", "NODECLASS", "DRIFTED"},
			[]string{"orders-x7k2p", "ami-0123456789abcdef0", "aws:///us-east-1a/i-0123456789abcdef0", "orders", "True"}},
		{[]string{"get", "nodepools"}, []string{"NAME", "NODECLASS", "NODES", "READY", "AGE"}, []string{"orders"}},
		{[]string{"get", "nodepools", "-o", "wide"}, []string{"NAME", "NODECLASS", "NODES", "READY", "AGE", "WEIGHT", "CPU", "MEMORY", "SPEND"}, []string{"orders"}},
		{[]string{"get", "ec2nodeclasses"}, []string{"NAME", "READY", "AGE"}, []string{"orders"}},
		{[]string{"get", "ec2nodeclasses", "-o", "wide"}, []string{"NAME", "READY", "AGE", "ROLE"}, []string{"orders", "KarpenterNodeRole"}},
	}
	for _, tc := range tests {
		out, err := kubectl(t, tc.args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v", strings.Join(tc.args, " "), err)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(tc.header, " ") {
			t.Errorf("kubectl %s header = %q, want %q", strings.Join(tc.args, " "), got, tc.header)
		}
		if !anyLineHasAll(lines[1:], tc.rowParts) {
			t.Errorf("kubectl %s: no row with %q in\n%s", strings.Join(tc.args, " "), tc.rowParts, out)
		}
	}

	// A pool without nodes shows 0 once its status is written, as Karpenter's does: the count is
	// written even when it is 0.
	np := &karpv1.NodePool{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "orders"}, np); err != nil {
		t.Fatal(err)
	}
	np.Status.Nodes = 0
	np.Status.Conditions = []metav1.Condition{{Type: karpv1.ConditionTypeReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}}
	if err := env.Client.Status().Update(t.Context(), np); err != nil {
		t.Fatalf("updating the pool's status: %v", err)
	}
	out, err := kubectl(t, "get", "nodepool", "orders", "--no-headers")
	if err != nil {
		t.Fatalf("kubectl get nodepool orders: %v", err)
	}
	if f := strings.Fields(out); len(f) < 4 || f[2] != "0" || f[3] != "True" {
		t.Errorf("kubectl get nodepool orders: %q, want NODES 0 and READY True", out)
	}

	// All three kinds in one call, as users type it.
	out, err = kubectl(t, "get", "ec2nodeclasses,nodepools,nodeclaims")
	if err != nil {
		t.Fatalf("kubectl get ec2nodeclasses,nodepools,nodeclaims: %v", err)
	}
	for _, want := range []string{"ec2nodeclass.karpenter.k8s.aws/orders", "nodepool.karpenter.sh/orders", "nodeclaim.karpenter.sh/orders-x7k2p"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get ec2nodeclasses,nodepools,nodeclaims lacks %q:\n%s", want, out)
		}
	}
}

func anyLineHasAll(lines, parts []string) bool {
	for _, l := range lines {
		fields := strings.Fields(l)
		all := true
		for _, p := range parts {
			if !slices.Contains(fields, p) {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

func TestRunbookPlaceholdersAreRejected(t *testing.T) {
	out, err := kubectl(t, "apply", "--dry-run=server", "-f", filepath.Join("testdata", "runbook-placeholders.yaml"))
	if err == nil {
		t.Fatalf("the manifest with placeholders was accepted:\n%s", out)
	}
	msg := err.Error()
	for _, want := range []string{
		`spec.amiSelectorTerms[0].id: Invalid value: "ami-REPLACE_VERIFIED_AMI"`,
		`spec.securityGroupSelectorTerms[0].id: Invalid value: "sg-REPLACE_NODE_SECURITY_GROUP"`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("kubectl's error does not name %q:\n%s", want, msg)
		}
	}
}

func TestKarpenterLatestManifestsApply(t *testing.T) {
	manifest := filepath.Join("testdata", "karpenter-latest.yaml")
	// kubectl validates fields strictly: a field the CRDs do not know is an error, not a warning.
	if out, err := kubectl(t, "apply", "--validate=strict", "-f", manifest); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := kubectl(t, "delete", "--ignore-not-found", "-f", manifest); err != nil {
			t.Errorf("delete: %v\n%s", err, out)
		}
	})
	for _, tc := range []struct{ resource, path, want string }{
		{"nodepool/latest-balanced", "{.spec.disruption.consolidationPolicy}", "Balanced"},
		{"nodepool/latest-balanced", "{.spec.disruption.budgets[1].reasons[0]}", "Unhealthy"},
		{"nodepool/latest-static", "{.spec.replicas}", "3"},
		{"ec2nodeclass/latest-windows", "{.spec.amiSelectorTerms[0].alias}", "windows2025@latest"},
		{"ec2nodeclass/latest-linux", "{.spec.kubelet.registryPullQPS}", "10"},
		{"ec2nodeclass/latest-linux", "{.spec.blockDeviceMappings[0].ebs.volumeInitializationRate}", "200"},
		{"ec2nodeclass/latest-linux", "{.spec.networkInterfaces[1].interfaceType}", "efa-only"},
		{"nodeoverlay/latest-discount", "{.spec.priceAdjustment}", "-10%"},
		{"nodeoverlay/latest-hugepages", "{.spec.capacity.hugepages-2Mi}", "100Mi"},
	} {
		out, err := kubectl(t, "get", tc.resource, "-o", "jsonpath="+tc.path)
		if err != nil {
			t.Fatalf("get %s: %v", tc.resource, err)
		}
		if out != tc.want {
			t.Errorf("%s %s = %q, want %q", tc.resource, tc.path, out, tc.want)
		}
	}
}

// TestKubectlDryRunRefusesShellInTaintsAndLabels: `kubectl apply --dry-run=server` of a NodePool
// whose taint value or template label value, or of a NodeClaim whose taint value, would break
// out of a boot script's quotes is refused, and kubectl's message names the field.
func TestKubectlDryRunRefusesShellInTaintsAndLabels(t *testing.T) {
	for _, c := range []struct{ name, manifest, field string }{
		{"nodepool taint", baseNodePool + "      taints: [{key: workload, value: \"x';touch /tmp/p;'\", effect: NoSchedule}]\n", "spec.template.spec.taints[0].value"},
		{"nodepool label", strings.Replace(baseNodePool, "  template:\n", "  template:\n    metadata: {labels: {team: \"$(id)\"}}\n", 1), "spec.template.metadata.labels.team"},
		{"nodeclaim taint", baseNodeClaim + "  taints: [{key: workload, value: \"`id`\", effect: NoExecute}]\n", "spec.taints[0].value"},
	} {
		path := filepath.Join(t.TempDir(), "manifest.yaml")
		if err := os.WriteFile(path, []byte(c.manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := kubectl(t, "apply", "--dry-run=server", "-f", path)
		if err == nil {
			t.Fatalf("%s: accepted: %s", c.name, out)
		}
		if msg := err.Error(); !strings.Contains(msg, c.field) || !strings.Contains(msg, "should match") {
			t.Fatalf("%s: kubectl's error %q does not name %s", c.name, msg, c.field)
		}
	}
}
