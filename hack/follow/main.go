// Command follow runs Capstan as the pod of a Deployment on the local cluster, whose pods kwok
// only pretends to run: Capstan runs on the host with the environment of the Deployment's newest
// Running and Ready pod and that pod's name as its hostname (so its leader-election identity,
// "<hostname>_<uuid>", names the pod, as in a real cluster). When a rollout brings up another pod
// (its environment changed, or `kubectl rollout restart`), Capstan is stopped and started again
// as that pod. Karpenter's end-to-end suites change Karpenter's settings this way, through
// kube-system/karpenter (hack/conformance.sh).
//
//	follow --kubeconfig K --capstan bin/capstan --log capstan.log [-- capstan flags]
//
// Capstan gets PATH, HOME, TMPDIR and KUBECONFIG from follow's environment and nothing else but
// the pod's: a variable removed from the Deployment is gone from Capstan too. An entry the host
// cannot give (valueFrom) is refused with the pod's and the variable's names.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// asPod is the argument by which follow runs itself in a new UTS namespace to take the pod's
// name as hostname and then become Capstan.
const asPod = "exec-as-pod"

func main() {
	if len(os.Args) > 3 && os.Args[1] == asPod {
		// follow exec-as-pod NAME PATH ARGS...
		if err := syscall.Sethostname([]byte(os.Args[2])); err != nil {
			fmt.Fprintf(os.Stderr, "follow: setting the hostname to %s: %v\n", os.Args[2], err)
			os.Exit(1)
		}
		err := syscall.Exec(os.Args[3], os.Args[3:], os.Environ())
		fmt.Fprintf(os.Stderr, "follow: running %s: %v\n", os.Args[3], err)
		os.Exit(1)
	}
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	namespace := flag.String("namespace", "kube-system", "namespace of the Deployment's pods")
	selector := flag.String("selector", "app.kubernetes.io/instance=karpenter", "label selector of the Deployment's pods")
	capstan := flag.String("capstan", "bin/capstan", "Capstan's binary")
	logPath := flag.String("log", "capstan.log", "file Capstan's output is appended to")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *namespace, *selector, *capstan, *logPath, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "follow:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, namespace, selector, capstan, logPath string, args []string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	out, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	var current string
	var child *exec.Cmd
	var exited chan struct{}
	defer func() { stopChild(child, exited) }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			fmt.Fprintln(os.Stderr, "follow: listing pods:", err)
			continue
		}
		if exited != nil {
			select {
			case <-exited:
				// Capstan stopped by itself: run it again, as a kubelet restarts a container.
				current = ""
			default:
			}
		}
		pod := newestRunning(pods.Items)
		if pod == nil || pod.Name == current {
			continue
		}
		env, err := podEnv(pod)
		if err != nil {
			return err
		}
		stopChild(child, exited)
		fmt.Fprintf(out, "[follow] %s: running Capstan as pod %s/%s\n", time.Now().UTC().Format(time.RFC3339), pod.Namespace, pod.Name)
		child, exited, err = startChild(self, pod.Name, capstan, args, env, out)
		if err != nil {
			return err
		}
		current = pod.Name
	}
}

// newestRunning is the newest of the pods that is Running, Ready and not being deleted, or nil.
func newestRunning(pods []corev1.Pod) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !ready(p) {
			continue
		}
		if best == nil || best.CreationTimestamp.Before(&p.CreationTimestamp) ||
			(best.CreationTimestamp.Equal(&p.CreationTimestamp) && best.Name < p.Name) {
			best = p
		}
	}
	return best
}

func ready(p *corev1.Pod) bool {
	return slices.ContainsFunc(p.Status.Conditions, func(c corev1.PodCondition) bool {
		return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
	})
}

// podEnv is the environment Capstan runs with as the pod: the host's PATH, HOME, TMPDIR and
// KUBECONFIG, then the pod's first container's variables.
func podEnv(p *corev1.Pod) ([]string, error) {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "KUBECONFIG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if len(p.Spec.Containers) == 0 {
		return nil, fmt.Errorf("pod %s/%s has no container", p.Namespace, p.Name)
	}
	for _, e := range p.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			return nil, fmt.Errorf("pod %s/%s: env %s: valueFrom cannot be given to a process on the host; set value", p.Namespace, p.Name, e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	return env, nil
}

// startChild runs Capstan as the pod: follow again, in a new UTS namespace (and a user namespace
// when not root, which may create one), setting the hostname and executing Capstan.
func startChild(self, pod, capstan string, args, env []string, out io.Writer) (*exec.Cmd, chan struct{}, error) {
	cmd := exec.Command(self, append([]string{asPod, pod, capstan}, args...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = out, out
	attr := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUTS, Pdeathsig: syscall.SIGTERM}
	if os.Geteuid() != 0 {
		attr.Cloneflags |= syscall.CLONE_NEWUSER
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("starting Capstan as pod %s: %w", pod, err)
	}
	exited := make(chan struct{})
	go func() {
		if err := cmd.Wait(); err != nil {
			fmt.Fprintln(out, "[follow] Capstan exited:", err)
		}
		close(exited)
	}()
	return cmd, exited, nil
}

// stopChild asks Capstan to stop (SIGTERM: it gives up its lease) and waits for it, killing it
// after 30 seconds.
func stopChild(cmd *exec.Cmd, exited chan struct{}) {
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}
