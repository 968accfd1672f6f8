package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/procfs"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
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

// started starts a cluster with opts (its assets and log filled in), stopped when the test ends,
// and a client of it.
func started(t *testing.T, opts localcluster.Options) (*localcluster.Cluster, kubernetes.Interface) {
	t.Helper()
	opts.AssetsDir, opts.Log = assets(t), testr.New(t)
	c, err := localcluster.Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	cs, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

// children lists the live processes whose parent is this test process.
func children(t *testing.T) []string {
	t.Helper()
	procs, err := procfs.AllProcs()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PPID != os.Getpid() || st.State == "Z" {
			continue
		}
		out = append(out, fmt.Sprintf("%d (%s)", st.PID, st.Comm))
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

// A pod annotated with a readiness delay is not made Ready before it, while one without is made
// Ready at once; one annotated with a delete delay is not removed before it once deleted, while
// one without is; all are bound to a kwok node by hand. The cluster's kube-scheduler runs with a
// configuration file of two profiles, and a pod naming the second is bound.
func TestDelayAnnotations(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(t.TempDir(), "scheduler.yaml")
	if err := os.WriteFile(conf, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: `+filepath.Join(dir, "kubeconfig")+`}
leaderElection: {leaderElect: false}
profiles: [{schedulerName: default-scheduler}, {schedulerName: second-profile}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, cs := started(t, localcluster.Options{Dir: dir, SchedulerConfig: conf})
	ctx := t.Context()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", Annotations: map[string]string{localcluster.KwokNodeAnnotation: "fake"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("10")}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := func(name string, annotations map[string]string) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
			Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "app", Image: "pause"}}}}
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The delayed pod first: when the other is Ready, kwok has seen both.
	pod("delayed", map[string]string{localcluster.ReadyDelayAnnotation: "1h"})
	pod("prompt", nil)
	ready := func(name string) bool {
		p, err := cs.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status == corev1.ConditionTrue
			}
		}
		return false
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return ready("prompt"), nil
	}); err != nil {
		t.Fatalf("the pod without a delay never turned Ready: %v", err)
	}
	if ready("delayed") {
		t.Errorf("the pod annotated %s: 1h is Ready", localcluster.ReadyDelayAnnotation)
	}

	second := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "second-profile", Namespace: "default"},
		Spec: corev1.PodSpec{SchedulerName: "second-profile", Containers: []corev1.Container{{Name: "app", Image: "pause"}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, second.Name, metav1.GetOptions{})
		return err == nil && p.Spec.NodeName == node.Name, err
	}); err != nil {
		t.Fatalf("the pod of the scheduler's second profile was not bound: %v", err)
	}

	// A pod labelled kwok.x-k8s.io/stage=unhealthy runs and never turns Ready.
	sick := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "unhealthy", Namespace: "default", Labels: map[string]string{localcluster.UnhealthyStageLabel: "unhealthy"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "app", Image: "pause"}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, sick, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, sick.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}); err != nil {
		t.Fatalf("the pod labelled unhealthy never ran: %v", err)
	}
	if ready(sick.Name) {
		t.Errorf("the pod labelled %s=unhealthy is Ready", localcluster.UnhealthyStageLabel)
	}

	// Deleted, a pod annotated with a delete delay stays (terminating) while one without goes.
	pod("lingering", map[string]string{localcluster.DeleteDelayAnnotation: "1h"})
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		return ready("lingering"), nil
	}); err != nil {
		t.Fatalf("the pod with a delete delay never turned Ready: %v", err)
	}
	for _, name := range []string{"lingering", "prompt"} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods("default").Get(ctx, "prompt", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	}); err != nil {
		t.Fatalf("the deleted pod without a delay was never removed: %v", err)
	}
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "lingering", metav1.GetOptions{}); err != nil || p.DeletionTimestamp.IsZero() {
		t.Errorf("the pod annotated %s: 1h: %v (deletion %v), want it terminating still", localcluster.DeleteDelayAnnotation, err, p.GetDeletionTimestamp())
	}
}

// CrashAPIServer drops every connection (a watch opened before it ends), and afterwards the same
// kubeconfig reaches the API server again, with what was stored before the crash.
func TestCrashAPIServer(t *testing.T) {
	c, cs := started(t, localcluster.Options{Dir: t.TempDir()})
	ctx := t.Context()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "before", Namespace: "default"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := cs.CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := c.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	// Events of the ConfigMaps that exist, until the connection drops.
	for closed := false; !closed; {
		select {
		case _, ok := <-w.ResultChan():
			closed = !ok
		case <-time.After(time.Minute):
			t.Fatal("a watch opened before the crash is still open a minute after it")
		}
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatalf("after the restart: %v", err)
	}
}

// kwok does not retry a pod-ready stage the API server refused (here an admission policy refuses
// it, as the API server refused two pod IPs in a race of kwok v0.8.0); the cluster nudges such a
// pod once it has been Pending for Options.NudgeAfter, and kwok then makes it ready. With nudging
// off (NudgeAfter -1) the pod stays Pending for good.
func TestAPodKwokLeftPendingIsNudgedReady(t *testing.T) {
	dir := t.TempDir()
	_, cs := started(t, localcluster.Options{Dir: dir, NudgeAfter: 2 * time.Second})
	ctx := t.Context()
	const refuse = "test.capstan.dev/refuse-status"
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-status"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/status"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{Expression: `!has(object.metadata.labels) || !('` + refuse + `' in object.metadata.labels)`}},
		},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "refuse-status"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}},
	}
	if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "kwok-0", Annotations: map[string]string{localcluster.KwokNodeAnnotation: "fake"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourcePods: resource.MustParse("10")}}}
	if _, err := cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The policy is enforced once a dry-run status update of a labelled pod is refused.
	probe := func(name string) error {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{refuse: "yes"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "pause"}}}}
		p, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		p.Status.Message = "probe"
		_, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return errors.Join(err, cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}))
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return apierrors.IsInvalid(probe("probe")), nil
	}); err != nil {
		t.Fatalf("the admission policy was never enforced: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: "default", Labels: map[string]string{refuse: "yes"}},
		Spec: corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "app", Image: "pause"}}}}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kwok tried and was refused: its log says so.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		log, err := os.ReadFile(filepath.Join(dir, "logs", "kwok.log"))
		return err == nil && strings.Contains(string(log), "default/refused") && strings.Contains(string(log), "failed to apply stage"), nil
	}); err != nil {
		t.Fatalf("kwok never tried to make the pod ready: %v", err)
	}
	if err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return probe("probe-after") == nil, nil
	}); err != nil {
		t.Fatalf("the admission policy was still enforced a minute after its binding went: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, err
	}); err != nil {
		t.Fatalf("the pod kwok left pending never ran: %v", err)
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations[localcluster.NudgedAnnotation] == "" {
		t.Errorf("the pod ran without a nudge (%s unset): kwok retried by itself", localcluster.NudgedAnnotation)
	}
}
