package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
)

// kubectl's connection flags reach every command: impersonation (--as) on the real API server,
// where RBAC lets one user read the cluster and refuses another; a bad --request-timeout is one
// error naming it; --context and -n as kubectl reads them.
func TestKubectlFlagsReachEveryCommand(t *testing.T) {
	ctx := t.Context()
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	cls := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: "flags"},
		Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"m5.large"}}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: "flags"}}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "flags"}
	reader := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "capstan-plugin-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "capstan-plugin-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: reader.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "alice"}}}
	for _, o := range []client.Object{cls, np, reader, binding} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), o) })
	}
	out := filepath.Join(t.TempDir(), "cluster.json")
	commands := map[string][]string{
		"explain nodepool": {"explain", "nodepool", "flags"},
		"explain pod":      {"explain", "pod", "nope", "-n", "batch"},
		"simulate":         {"simulate"},
		"record":           {"record", "-o", out},
	}
	for name, args := range commands {
		args = append(args, "--kubeconfig", kubeconfig)
		// bob may not read the cluster: every command fails, naming the refusal and bob.
		if _, _, err := run(append(args, "--as", "bob")...); err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), `"bob"`) {
			t.Errorf("%s --as bob: %v, want refused for bob", name, err)
		}
		// alice may: each command answers as it does for the admin (explain pod: the pod is not
		// found in namespace batch, read as alice).
		_, _, err := run(append(args, "--as", "alice")...)
		if name == "explain pod" {
			if err == nil || !strings.Contains(err.Error(), `pod batch/nope: pods "nope" not found`) {
				t.Errorf("%s --as alice: %v, want the pod not found in batch", name, err)
			}
		} else if err != nil {
			t.Errorf("%s --as alice: %v", name, err)
		}
		if _, _, err := run(append(args, "--request-timeout", "soon")...); err == nil || !strings.Contains(err.Error(), `--request-timeout "soon"`) {
			t.Errorf("%s --request-timeout soon: %v, want the value refused", name, err)
		}
		if _, _, err := run(append(args, "--context", "nowhere")...); err == nil || !strings.Contains(err.Error(), "nowhere") {
			t.Errorf("%s --context nowhere: %v, want the context named", name, err)
		}
	}
}
