package sim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/periodic"
)

// KwokNodeAnnotation marks nodes kwok simulates.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

// Joiner plays the part of the machines' kubelets: once a machine's registration time has come,
// it creates the machine's Node, as a kubelet registering would.
type Joiner struct {
	Cloud  *Cloud
	Client client.Client
	// Interval is how often Start looks for machines due to register (default 200ms), on Clock
	// (default the real clock: the simulated kubelets keep the wall's time).
	Interval time.Duration
	Clock    clock.Clock
}

// Start registers due machines until ctx ends. It implements controller-runtime's Runnable.
func (j *Joiner) Start(ctx context.Context) error {
	ctx = log.IntoContext(ctx, log.FromContext(ctx).WithValues("controller", "sim.joiner"))
	interval := j.Interval
	if interval == 0 {
		interval = 200 * time.Millisecond
	}
	var clk clock.Clock = clock.RealClock{}
	if j.Clock != nil {
		clk = j.Clock
	}
	return periodic.Run(ctx, clk, interval, "registering simulated machines", j.Sync)
}

// NeedLeaderElection makes only the leader register machines.
func (j *Joiner) NeedLeaderElection() bool { return true }

// registerWorkers bounds the Nodes created at once: a burst's machines come due together, and
// one API call at a time registered a thousand of them over minutes.
const registerWorkers = 16

// Sync creates the Nodes of every machine due to register, several at once; one that fails does
// not hold the others back (it is retried on the next Sync).
func (j *Joiner) Sync(ctx context.Context) error {
	due, err := j.Cloud.dueForRegistration()
	if err != nil {
		return err
	}
	errs := make([]error, len(due))
	sem := make(chan struct{}, registerWorkers)
	var wg sync.WaitGroup
	for i, inst := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := j.register(ctx, inst); err != nil {
				errs[i] = fmt.Errorf("registering %s: %w", inst.ID, err)
				return
			}
			errs[i] = j.Cloud.markRegistered(inst.ID)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (j *Joiner) register(ctx context.Context, inst *Instance) error {
	labels := maps.Clone(inst.Labels)
	taints := []corev1.Taint{karpv1.UnregisteredNoExecuteTaint}
	nc := &karpv1.NodeClaim{}
	if err := j.Client.Get(ctx, client.ObjectKey{Name: inst.NodeClaim}, nc); err == nil {
		// The machine boots with its NodeClaim's labels and taints, as the kubelet is configured.
		maps.Copy(labels, nc.Labels)
		taints = append(taints, nc.Spec.Taints...)
		taints = append(taints, nc.Spec.StartupTaints...)
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	name := inst.NodeClaim
	labels[corev1.LabelHostname] = name
	// The Node is created with its status, as a kubelet registers: a Node without capacity would
	// be initialised by kwok with its placeholder capacity in between, and scheduled onto as such.
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{KwokNodeAnnotation: "fake"}},
		Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID(), Taints: taints},
		Status:     nodeStatus(inst, labels),
	}
	err := j.Client.Create(ctx, node)
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	// Registered before (a restart between creating the Node and recording it): make sure its
	// status is the machine's.
	if err := j.Client.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	orig := node.DeepCopy()
	st := nodeStatus(inst, labels)
	node.Status.Capacity, node.Status.Allocatable, node.Status.NodeInfo = st.Capacity, st.Allocatable, st.NodeInfo
	return j.Client.Status().Patch(ctx, node, client.MergeFrom(orig))
}

// nodeStatus is what the machine's kubelet reports at registration.
func nodeStatus(inst *Instance, labels map[string]string) corev1.NodeStatus {
	return corev1.NodeStatus{
		Capacity:    inst.Capacity.DeepCopy(),
		Allocatable: inst.Allocatable.DeepCopy(),
		NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", Architecture: labels[corev1.LabelArchStable],
			OperatingSystem: "linux"},
	}
}
