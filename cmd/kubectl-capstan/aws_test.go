package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// withStderr runs f with the process's stderr captured (the AWS SDK logs there, not to the
// command's writer) and returns what was written to it.
func withStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() { b, _ := io.ReadAll(r); done <- string(b) }()
	f()
	os.Stderr = saved
	_ = w.Close()
	return <-done
}

// On the AWS provider, with the runbook's orders pool: explain pod answers with credentials and,
// without them, fails with the credential error and prints nothing, rather than say no NodePool
// fits; explain nodepool fails the same way.
func TestExplainOnAWSWithoutCredentialsFails(t *testing.T) {
	ctx := t.Context()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "orders-0", Namespace: "default"}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{"workload": "orders"},
		Tolerations:  []corev1.Toleration{{Key: "workload", Operator: corev1.TolerationOpEqual, Value: "orders", Effect: corev1.TaintEffectNoSchedule}},
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}}}
	for _, o := range []client.Object{nc, np, pod} {
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c, ok := o.(*awsv1.EC2NodeClass); ok && env.Client.Get(context.Background(), client.ObjectKeyFromObject(c), c) == nil {
				c.Finalizers = nil
				_ = env.Client.Update(context.Background(), c)
			}
			_ = env.Client.Delete(context.Background(), o)
		})
	}
	if _, err := (&ec2nodeclass.Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}).
		Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.Kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	// No credentials anywhere the SDK's chain looks (and no instance metadata service).
	home := t.TempDir()
	for k, v := range map[string]string{"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_SESSION_TOKEN": "", "AWS_PROFILE": "",
		"AWS_CONFIG_FILE": filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE": filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED": "true", "AWS_CONTAINER_CREDENTIALS_FULL_URI": "", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI": "",
		"AWS_WEB_IDENTITY_TOKEN_FILE": ""} {
		t.Setenv(k, v)
	}
	awsFlags := []string{"--kubeconfig", kubeconfig, "--cloud-provider", "aws", "--aws-endpoint-url", f.AWS.URL(),
		"--aws-region", f.AWS.Region(), "--cluster-name", awstest.Cluster}
	for _, args := range [][]string{{"explain", "pod", "orders-0", "-n", "default"}, {"explain", "nodepool", np.Name}} {
		var out string
		var err error
		stderr := withStderr(t, func() { out, _, err = run(append(args, awsFlags...)...) })
		if err == nil || out != "" || !strings.Contains(err.Error(), "credentials") || !strings.Contains(err.Error(), "nodepool "+np.Name) {
			t.Errorf("%v without credentials: printed %q, error %v; want an error naming the pool and the credentials, nothing printed", args, out, err)
		}
		if stderr != "" {
			t.Errorf("%v without credentials wrote to stderr besides the error:\n%s", args, stderr)
		}
	}

	t.Setenv("AWS_ACCESS_KEY_ID", awstest.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	out, _, err := run(append([]string{"explain", "pod", "orders-0", "-n", "default"}, awsFlags...)...)
	if err != nil || !strings.Contains(out, "NodePool "+np.Name) {
		t.Errorf("explain pod with credentials: error %v\n%s", err, out)
	}
}
