// Command scaledown measures a node autoscaler through a scale-down on a running cluster: it
// applies a NodePool and one or two Deployments, waits until every pod runs, scales the
// Deployments down (in one step or three), and reads every 10 s until the end: the NodeClaims,
// priced at the offering prices of a kwok-format instance-type menu, the pods pending, and the
// pods evicted (a pod whose deletion starts while its node carries karpenter.sh/disrupted, or
// after its node is gone). It works with any autoscaler that speaks Karpenter's v1 API: it only
// reads NodeClaims, Nodes and Pods, and writes the NodePool and the Deployments.
// hack/scaledown.sh brings up the local cluster and the autoscaler around it.
//
//	go run ./hack/scaledown --kubeconfig K --menu instance_types.json --scenario 1000-700 \
//	    --policy WhenEmptyOrUnderutilized --node-class capstan.dev/SimNodeClass/default
//
// The last line on standard output is a JSON summary.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/scheme"
)

// namespace holds the Deployments.
const namespace = "default"

// step is one scale-down: the replicas of each Deployment after it.
type step map[string]int32

// workload is a Deployment's pods.
type workload struct {
	name     string
	replicas int32
	cpu      string
	memory   string
}

// scenario is a workload and its scale-downs.
type scenario struct {
	workloads []workload
	steps     []step
}

var scenarios = map[string]scenario{
	"1000-300": {workloads: []workload{{"burst", 1000, "250m", "256Mi"}}, steps: []step{{"burst": 300}}},
	"1000-700": {workloads: []workload{{"burst", 1000, "250m", "256Mi"}}, steps: []step{{"burst": 700}}},
	"three-step": {
		workloads: []workload{{"small", 600, "250m", "256Mi"}, {"large", 100, "1", "1Gi"}},
		steps:     []step{{"small": 450, "large": 75}, {"small": 300, "large": 50}, {"small": 150, "large": 25}},
	},
	// Other pod sizes and scale-in ratios, so that no rule is tuned to one shape.
	"1cpu-400-100": {workloads: []workload{{"burst", 400, "1", "1Gi"}}, steps: []step{{"burst": 100}}},
	"500m-800-600": {workloads: []workload{{"burst", 800, "500m", "512Mi"}}, steps: []step{{"burst": 600}}},
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "scaledown:", err)
		os.Exit(1)
	}
}

type options struct {
	kubeconfig, menu, scenario, policy, nodeClass string
	wait, settle, stepGap                         time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the cluster's kubeconfig")
	flag.StringVar(&o.menu, "menu", "", "instance types in the kwok provider's format (instance_types.json), for prices")
	flag.StringVar(&o.scenario, "scenario", "1000-300", "1000-300, 1000-700, three-step, 1cpu-400-100 or 500m-800-600")
	flag.StringVar(&o.policy, "policy", string(karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized), "the NodePool's consolidationPolicy")
	flag.StringVar(&o.nodeClass, "node-class", "capstan.dev/SimNodeClass/default", "the NodePool's nodeClassRef as group/kind/name")
	flag.DurationVar(&o.wait, "wait", time.Minute, "how long after every pod runs the first scale-down starts")
	flag.DurationVar(&o.settle, "settle", 6*time.Minute, "how long to read after the last scale-down")
	flag.DurationVar(&o.stepGap, "step-gap", 3*time.Minute, "time between the steps of a scale-down in several steps")
	flag.Parse()
	sc, ok := scenarios[o.scenario]
	if !ok {
		return fmt.Errorf("--scenario %q: want 1000-300, 1000-700, three-step, 1cpu-400-100 or 500m-800-600", o.scenario)
	}
	ref := strings.Split(o.nodeClass, "/")
	if len(ref) != 3 {
		return fmt.Errorf("--node-class %q: want group/kind/name", o.nodeClass)
	}
	if o.menu == "" {
		return errors.New("--menu: required (the instance_types.json the autoscaler offers)")
	}
	data, err := os.ReadFile(o.menu)
	if err != nil {
		return fmt.Errorf("--menu: %w", err)
	}
	menu, err := catalog.ParseKWOK(data)
	if err != nil {
		return fmt.Errorf("--menu %s: %w", o.menu, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return fmt.Errorf("--kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	s, err := scheme.New()
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	m := &meter{client: c, prices: prices(menu), evicted: map[types.UID]bool{}}
	return m.run(ctx, cs, o, sc, ref)
}

// prices maps instance type, capacity type and zone to the menu's price.
func prices(menu []*cloudprovider.InstanceType) map[[3]string]float64 {
	out := map[[3]string]float64{}
	for _, it := range menu {
		for _, o := range it.Offerings {
			out[[3]string{it.Name, o.CapacityType, o.Zone}] = o.Price
		}
	}
	return out
}

// meter watches the cluster and counts.
type meter struct {
	client client.Client
	prices map[[3]string]float64
	nodes  cache.Indexer
	pods   cache.Store

	mu sync.Mutex
	// scaledAt is when the first scale-down started; evictions before it are not counted.
	scaledAt time.Time
	evicted  map[types.UID]bool
	// evictions and movedTwice count pods evicted after scaledAt, and those of them created after it.
	evictions, movedTwice int
}

// fleet is what the NodeClaims and pods are at one reading.
type fleet struct {
	At         float64 `json:"atSeconds"`
	NodeClaims int     `json:"nodeClaims"`
	VCPU       float64 `json:"vcpu"`
	Price      float64 `json:"dollarsPerHour"`
	Unpriced   int     `json:"unpriced"`
	Running    int     `json:"running"`
	Pending    int     `json:"pending"`
	Evictions  int     `json:"evictions"`
	MovedTwice int     `json:"movedTwice"`
	Types      string  `json:"types"`
}

// summary is the JSON line printed last.
type summary struct {
	Scenario     string  `json:"scenario"`
	Policy       string  `json:"policy"`
	AllRunningS  float64 `json:"allRunningSeconds"`
	Burst        fleet   `json:"burst"`
	End          fleet   `json:"end"`
	SettledAfter float64 `json:"settledAfterSeconds"`
}

func (m *meter) run(ctx context.Context, cs kubernetes.Interface, o options, sc scenario, ref []string) error {
	factory := informers.NewSharedInformerFactory(cs, 0)
	podInf := factory.Core().V1().Pods().Informer()
	nodeInf := factory.Core().V1().Nodes().Informer()
	m.nodes = nodeInf.GetIndexer()
	m.pods = podInf.GetStore()
	if _, err := podInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) {
			// An update counts only once the pod is deleting; a delete event always counts.
			if pod, ok := obj.(*corev1.Pod); ok && pod.DeletionTimestamp != nil {
				m.observe(obj)
			}
		},
		DeleteFunc: m.observe,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	if err := m.apply(ctx, o, sc, ref); err != nil {
		return err
	}
	start := time.Now()
	total := int32(0)
	for _, w := range sc.workloads {
		total += w.replicas
	}
	fmt.Printf("# %s, %s: waiting for %d pods to run\n", o.scenario, o.policy, total)
	for {
		f, err := m.read(ctx, start)
		if err != nil {
			return err
		}
		if f.Running == int(total) {
			break
		}
		if time.Since(start) > 15*time.Minute {
			return fmt.Errorf("only %d of %d pods run after 15 minutes", f.Running, total)
		}
		if !sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
	out := summary{Scenario: o.scenario, Policy: o.policy, AllRunningS: time.Since(start).Seconds()}
	fmt.Printf("# all %d pods run after %.1f s; scaling down in %s\n", total, out.AllRunningS, o.wait)
	if !sleep(ctx, o.wait) {
		return ctx.Err()
	}
	var err error
	if out.Burst, err = m.read(ctx, start); err != nil {
		return err
	}
	m.print("burst", out.Burst)
	m.mu.Lock()
	m.scaledAt = time.Now()
	m.mu.Unlock()
	var last fleet
	changed := time.Now()
	for i, st := range sc.steps {
		m.deletionCosts(i + 1)
		for name, n := range st {
			if err := m.scale(ctx, name, n); err != nil {
				return err
			}
		}
		fmt.Printf("# step %d: %v\n", i+1, st)
		until := time.Now().Add(o.stepGap)
		if i == len(sc.steps)-1 {
			until = time.Now().Add(o.settle)
		}
		for time.Now().Before(until) {
			if !sleep(ctx, 10*time.Second) {
				return ctx.Err()
			}
			f, err := m.read(ctx, start)
			if err != nil {
				return err
			}
			m.print("read", f)
			if f.Types != last.Types || f.NodeClaims != last.NodeClaims {
				changed = time.Now()
			}
			last = f
		}
	}
	out.End = last
	m.mu.Lock()
	out.SettledAfter = changed.Sub(m.scaledAt).Seconds()
	m.mu.Unlock()
	b, err := json.Marshal(out)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}

// observe counts a pod whose deletion starts (or that is gone) while its node is being disrupted.
func (m *meter) observe(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" || pod.Namespace != namespace {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.scaledAt.IsZero() || m.evicted[pod.UID] {
		return
	}
	item, exists, _ := m.nodes.GetByKey(pod.Spec.NodeName)
	disrupted := !exists
	if exists {
		node := item.(*corev1.Node)
		disrupted = node.DeletionTimestamp != nil || slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == karpv1.DisruptedTaintKey
		})
	}
	if !disrupted {
		return
	}
	m.evicted[pod.UID] = true
	m.evictions++
	if pod.CreationTimestamp.After(m.scaledAt) {
		m.movedTwice++
	}
}

func (m *meter) apply(ctx context.Context, o options, sc scenario, ref []string) error {
	pool := &karpv1.NodePool{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec: karpv1.NodePoolSpec{
			Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
				NodeClassRef: &karpv1.NodeClassReference{Group: ref[0], Kind: ref[1], Name: ref[2]},
				Requirements: []karpv1.NodeSelectorRequirementWithMinValues{
					{Key: corev1.LabelArchStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{"amd64"}},
					{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"spot", "on-demand"}},
				},
			}},
			Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2000")},
			Disruption: karpv1.Disruption{
				ConsolidationPolicy: karpv1.ConsolidationPolicy(o.policy),
				ConsolidateAfter:    karpv1.MustParseNillableDuration("30s"),
			},
		},
	}
	if err := m.client.Create(ctx, pool); err != nil {
		return fmt.Errorf("creating the NodePool: %w", err)
	}
	for _, w := range sc.workloads {
		labels := map[string]string{"app": w.name}
		d := &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: w.name, Namespace: namespace},
			Spec: appsv1.DeploymentSpec{
				Replicas: &w.replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{
						Containers: []corev1.Container{{
							Name: "app", Image: "registry.k8s.io/pause:3.10",
							Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
								corev1.ResourceCPU: resource.MustParse(w.cpu), corev1.ResourceMemory: resource.MustParse(w.memory),
							}},
						}},
					},
				},
			},
		}
		if err := m.client.Create(ctx, d); err != nil {
			return fmt.Errorf("creating Deployment %s: %w", w.name, err)
		}
	}
	return nil
}

// deletionCosts prints, before a scale-down step, how many running pods carry a
// controller.kubernetes.io/pod-deletion-cost and how many nodes hold pods both with and without
// one, or with several values: a ReplicaSet's scale-in empties whole nodes only when every pod
// carries its node's value.
func (m *meter) deletionCosts(step int) {
	with, total, mixed := 0, 0, 0
	perNode := map[string]map[string]bool{}
	for _, obj := range m.pods.List() {
		p := obj.(*corev1.Pod)
		if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
			continue
		}
		total++
		v, ok := p.Annotations[corev1.PodDeletionCost]
		if ok {
			with++
		} else {
			v = "unset"
		}
		if perNode[p.Spec.NodeName] == nil {
			perNode[p.Spec.NodeName] = map[string]bool{}
		}
		perNode[p.Spec.NodeName][v] = true
	}
	for _, vs := range perNode {
		if len(vs) > 1 {
			mixed++
		}
	}
	fmt.Printf("# before step %d: %d of %d pods carry a deletion cost; %d of %d nodes hold pods of several values (or none)\n", step, with, total, mixed, len(perNode))
}

func (m *meter) scale(ctx context.Context, name string, n int32) error {
	d := &appsv1.Deployment{}
	if err := m.client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, d); err != nil {
		return err
	}
	patch := client.MergeFrom(d.DeepCopy())
	d.Spec.Replicas = &n
	return m.client.Patch(ctx, d, patch)
}

// read prices the NodeClaims and counts the pods.
func (m *meter) read(ctx context.Context, start time.Time) (fleet, error) {
	f := fleet{At: time.Since(start).Seconds()}
	var claims karpv1.NodeClaimList
	if err := m.client.List(ctx, &claims); err != nil && !apierrors.IsNotFound(err) {
		return f, err
	}
	count := map[string]int{}
	for _, nc := range claims.Items {
		f.NodeClaims++
		cpu := nc.Status.Capacity[corev1.ResourceCPU]
		f.VCPU += cpu.AsApproximateFloat64()
		it := nc.Labels[corev1.LabelInstanceTypeStable]
		p, ok := m.prices[[3]string{it, nc.Labels[karpv1.CapacityTypeLabelKey], nc.Labels[corev1.LabelTopologyZone]}]
		if !ok {
			f.Unpriced++
		}
		f.Price += p
		count[it+"/"+nc.Labels[karpv1.CapacityTypeLabelKey]]++
	}
	keys := make([]string, 0, len(count))
	for k, n := range count {
		keys = append(keys, fmt.Sprintf("%d×%s", n, k))
	}
	slices.Sort(keys)
	f.Types = strings.Join(keys, " ")
	var pods corev1.PodList
	if err := m.client.List(ctx, &pods, client.InNamespace(namespace)); err != nil {
		return f, err
	}
	for _, p := range pods.Items {
		switch {
		case p.DeletionTimestamp != nil:
		case p.Status.Phase == corev1.PodRunning:
			f.Running++
		case p.Status.Phase == corev1.PodPending:
			f.Pending++
		}
	}
	m.mu.Lock()
	f.Evictions, f.MovedTwice = m.evictions, m.movedTwice
	m.mu.Unlock()
	return f, nil
}

func (m *meter) print(what string, f fleet) {
	fmt.Printf("%-5s t=%6.1fs claims=%-3d vcpu=%-7.2f $/h=%-7.3f running=%-4d pending=%-4d evicted=%-4d twice=%d unpriced=%d  %s\n",
		what, f.At, f.NodeClaims, f.VCPU, f.Price, f.Running, f.Pending, f.Evictions, f.MovedTwice, f.Unpriced, f.Types)
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}
