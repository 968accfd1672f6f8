package aws

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
)

// chartNamespace is where the chart is installed, as the runbook installs it.
const chartNamespace = "kube-system"

// serviceAccount is the identity the chart gives Capstan.
const serviceAccount = "system:serviceaccount:" + chartNamespace + ":capstan"

// helm runs bin/helm.
func helm(root string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(root, "bin", "helm"), args...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// installChart lints and renders both charts with the runbook's values (and this cluster's
// name), dry-runs every rendered object on the API server, creates the chart's ServiceAccount
// and RBAC, and writes a kubeconfig impersonating that ServiceAccount for Capstan.
func installChart(root string) error {
	values := filepath.Join(root, "examples", "aws", "karpenter-values.yaml")
	// The source tree's chart names no image (a released one names its own): the runbook's
	// values, with one.
	image := []string{"--set", "controller.image.repository=registry.example/capstan/controller"}
	if _, err := helm(root, "lint", "charts/capstan-crd", "-f", values); err != nil {
		return err
	}
	if _, err := helm(root, append([]string{"lint", "charts/capstan", "-f", values}, image...)...); err != nil {
		return err
	}
	crds, err := helm(root, "template", "capstan-crd", "charts/capstan-crd", "--namespace", chartNamespace)
	if err != nil {
		return err
	}
	rendered, err := helm(root, append([]string{"template", "capstan", "charts/capstan", "--namespace", chartNamespace, "-f", values,
		"--set", "settings.clusterName=" + cluster, "--set", "settings.interruptionQueue=" + queue}, image...)...)
	if err != nil {
		return err
	}
	all := filepath.Join(s.Dir, "rendered.yaml")
	if err := os.WriteFile(all, []byte(crds+"\n---\n"+rendered), 0o644); err != nil {
		return err
	}
	if err := kubectl("apply", "--dry-run=server", "-f", all); err != nil {
		return fmt.Errorf("the rendered charts do not pass a server-side dry run: %w", err)
	}
	// Install what gives Capstan its identity; the Deployment itself cannot run here (no image),
	// Capstan runs as a process impersonating the ServiceAccount instead.
	var rbac []string
	for _, doc := range strings.Split(rendered, "\n---\n") {
		for _, kind := range []string{"kind: ServiceAccount", "kind: ClusterRole\n", "kind: ClusterRoleBinding", "kind: Role\n", "kind: RoleBinding"} {
			if strings.Contains(doc+"\n", kind) {
				rbac = append(rbac, doc)
				break
			}
		}
	}
	if len(rbac) != 5 {
		return fmt.Errorf("found %d RBAC objects in the rendered chart, want 5", len(rbac))
	}
	identity := filepath.Join(s.Dir, "rbac.yaml")
	if err := os.WriteFile(identity, []byte(strings.Join(rbac, "\n---\n")), 0o644); err != nil {
		return err
	}
	if err := kubectl("apply", "-f", identity); err != nil {
		return err
	}
	cfg, err := clientcmd.LoadFromFile(s.Cluster.KubeconfigPath)
	if err != nil {
		return err
	}
	for _, ai := range cfg.AuthInfos {
		ai.Impersonate = serviceAccount
		ai.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + chartNamespace, "system:authenticated"}
	}
	s.kubeconfig = filepath.Join(s.Dir, "capstan.kubeconfig")
	return clientcmd.WriteToFile(*cfg, s.kubeconfig)
}

func kubectl(args ...string) error {
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", s.Cluster.KubeconfigPath}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}
