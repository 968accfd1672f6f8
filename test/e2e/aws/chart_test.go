package aws

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
// name), dry-runs every rendered object on the API server, creates the chart's ServiceAccount,
// RBAC and the admission policy on its pod writes, and writes a kubeconfig impersonating that
// ServiceAccount for Capstan.
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
		for _, kind := range []string{"kind: ServiceAccount", "kind: ClusterRole\n", "kind: ClusterRoleBinding", "kind: Role\n", "kind: RoleBinding",
			"kind: ValidatingAdmissionPolicy\n", "kind: ValidatingAdmissionPolicyBinding"} {
			if strings.Contains(doc+"\n", kind) {
				rbac = append(rbac, doc)
				break
			}
		}
	}
	if len(rbac) != 7 {
		return fmt.Errorf("found %d RBAC and admission policy objects in the rendered chart, want 7", len(rbac))
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

// The chart's admission policy, on the real API server, impersonating the chart's
// ServiceAccount: a patch of a pod's image, labels or another annotation is refused; a patch of
// the annotations Capstan owns is allowed, and so is a delete. The same patches by another user
// are not matched.
func TestTheControllerChangesOnPodsOnlyItsAnnotations(t *testing.T) {
	ctx := t.Context()
	cfg := rest.CopyConfig(s.Cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	as, err := client.New(cfg, client.Options{Scheme: s.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "vap-probe", Namespace: "default", Labels: map[string]string{"app": "vap-probe"},
		Annotations: map[string]string{"team": "orders"}},
		Spec: corev1.PodSpec{NodeSelector: map[string]string{"pool": "nowhere"}, Containers: []corev1.Container{{Name: "c", Image: "pause"}}}}
	if err := s.Client.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Client.Delete(context.Background(), pod) })
	patch := func(c client.Client, body string) error {
		return c.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}},
			client.RawPatch(types.MergePatchType, []byte(body)))
	}
	// The policy is in force once an image patch is refused (the API server loads it in a moment;
	// one let through before is undone, and each try names another image, never a no-op).
	tries := 0
	eventually(t, "the controller's image patch refused", time.Minute, func(context.Context) (bool, error) {
		tries++
		err := patch(as, fmt.Sprintf(`{"spec":{"containers":[{"name":"c","image":"evil-%d"}]}}`, tries))
		return err != nil && strings.Contains(err.Error(), "may not change a pod's spec"), nil
	})
	if err := patch(s.Client, `{"spec":{"containers":[{"name":"c","image":"pause"}]}}`); err != nil {
		t.Fatal(err)
	}
	for what, body := range map[string]string{
		"a label":            `{"metadata":{"labels":{"app":"other"}}}`,
		"another annotation": `{"metadata":{"annotations":{"team":"payments"}}}`,
		"a finalizer":        `{"metadata":{"finalizers":["example.com/hold"]}}`,
	} {
		if err := patch(as, body); err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) {
			t.Errorf("the controller's patch of %s: %v, want refused", what, err)
		}
	}
	owned := `{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"-5","capstan.dev/pod-deletion-cost":"-5","capstan.dev/missed-nodeclaims":"a-1"}}}`
	if err := patch(as, owned); err != nil {
		t.Fatalf("the controller's patch of its own annotations: %v", err)
	}
	if err := patch(as, `{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":null}}}`); err != nil {
		t.Fatalf("the controller taking its annotation back: %v", err)
	}
	if err := patch(s.Client, `{"metadata":{"labels":{"app":"relabelled"}}}`); err != nil {
		t.Fatalf("another user's patch: %v", err)
	}
	got := &corev1.Pod{}
	if err := s.Client.Get(ctx, client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Containers[0].Image != "pause" || got.Annotations["team"] != "orders" || got.Annotations["capstan.dev/missed-nodeclaims"] != "a-1" {
		t.Errorf("pod after the patches: image %s, annotations %v", got.Spec.Containers[0].Image, got.Annotations)
	}
	if err := as.Delete(ctx, got); err != nil {
		t.Errorf("the controller's delete: %v", err)
	}
}
