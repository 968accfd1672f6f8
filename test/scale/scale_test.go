package scale

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	dto "github.com/prometheus/client_model/go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider/sim"
	"capstan.dev/capstan/internal/disruptionplan"
	"capstan.dev/capstan/internal/scheme"
	"capstan.dev/capstan/test/e2e"
)

var (
	h           *e2e.Harness
	metricsAddr string
	statePath   string
)

// defaultKCMQPS is the kube-controller-manager's API rate the benchmark runs with unless
// CAPSTAN_E2E_KCM_QPS says otherwise: at Kubernetes' default of 20 writes per second a
// ReplicaSet needs 1,000 s to create 20,000 pods, and that, not the autoscaler, would be measured.
const defaultKCMQPS = "1000"

func TestMain(m *testing.M) {
	flag.Parse()
	// The package has only a benchmark: without -bench there is nothing to run, and no cluster
	// is started for it (`make test` builds and vets it).
	if f := flag.Lookup("test.bench"); f == nil || f.Value.String() == "" {
		os.Exit(m.Run())
	}
	// The benchmark's own informer cache logs through controller-runtime; nothing reads it.
	ctrllog.SetLogger(logr.Discard())
	if os.Getenv("CAPSTAN_E2E_KCM_QPS") == "" {
		_ = os.Setenv("CAPSTAN_E2E_KCM_QPS", defaultKCMQPS)
	}
	e2e.Main(m, "capstan-scale-", &h, func(hs *e2e.Harness) (func(), error) {
		statePath = filepath.Join(hs.Dir, "sim-cloud.json")
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		metricsAddr = l.Addr().String()
		_ = l.Close()
		// Capstan as production runs it: its own defaults, one replica.
		return nil, hs.Start([]string{"--kubeconfig", hs.Cluster.KubeconfigPath, "--disable-leader-election",
			"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=127.0.0.1:0", "--sim-state-file", statePath})
	})
}

// poolLabel ties each workload to its NodePool's machines.
const poolLabel = "scale.capstan.dev/pool"

// workload is one Deployment of the benchmark: its share of the pods, its size, its pool and
// the constraint it adds.
type workload struct {
	name, pool string
	share      float64
	cpu, mem   string
	constrain  func(*corev1.PodSpec, map[string]string)
}

var workloads = []workload{
	// Spread over the three zones, at most one pod apart (the kube-scheduler's hard rule).
	{"web", "general", 0.30, "500m", "512Mi", func(ps *corev1.PodSpec, l map[string]string) {
		ps.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: l}}}
	}},
	{"worker", "flex", 0.30, "250m", "256Mi", nil},
	// Kept out of one zone by node affinity.
	{"batch", "flex", 0.20, "1", "1Gi", func(ps *corev1.PodSpec, _ map[string]string) {
		ps.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"zone-a", "zone-b"}}}}}}}}
	}},
	// All in one zone, wherever the first lands (required pod affinity to its own pods).
	{"api", "memory", 0.10, "500m", "1Gi", func(ps *corev1.PodSpec, l map[string]string) {
		ps.Affinity = &corev1.Affinity{PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
			TopologyKey: corev1.LabelTopologyZone, LabelSelector: &metav1.LabelSelector{MatchLabels: l}}}}}
	}},
	// Spread by zone where it can be (ScheduleAnyway).
	{"cache", "memory", 0.10, "1", "2Gi", func(ps *corev1.PodSpec, l map[string]string) {
		ps.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone,
			WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: l}}}
	}},
}

// pools are the benchmark's NodePools: their names and the capacity types they may buy.
var pools = []struct {
	name          string
	capacityTypes []string
}{
	{"general", []string{karpv1.CapacityTypeOnDemand}},
	{"flex", []string{karpv1.CapacityTypeSpot, karpv1.CapacityTypeOnDemand}},
	{"memory", []string{karpv1.CapacityTypeOnDemand}},
}

// size reads the benchmark's size: CAPSTAN_SCALE_PODS pods in all (default 50,000), of which
// the burst is 40% (20,000) and the scale-down 30% of all.
func size(b *testing.B) int {
	n := 50000
	if v := os.Getenv("CAPSTAN_SCALE_PODS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 100 {
			b.Fatalf("CAPSTAN_SCALE_PODS=%q: want a whole number of pods, at least 100", v)
		}
	}
	return n
}

// BenchmarkScale runs the scale benchmark once on a fresh local cluster: 60% of the pods are
// brought up and run, then the other 40% come at once (the burst, measured), then every
// Deployment is scaled to 70% of the total and consolidation settles (measured).
//
//	go test -run XXX -bench BenchmarkScale -benchtime 1x -timeout 120m ./test/scale/
//	CAPSTAN_SCALE_PODS=10000 go test -run XXX -bench BenchmarkScale -benchtime 1x -timeout 60m ./test/scale/
//
// CAPSTAN_E2E_KCM_QPS sets the controller manager's API rate (default 1,000 here).
func BenchmarkScale(b *testing.B) {
	total := size(b)
	ctx := b.Context()
	for _, p := range pools {
		snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a", "zone-b", "zone-c"}}}
		np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: p.name}}
		np.Spec.Template.ObjectMeta.Labels = map[string]string{poolLabel: p.name}
		np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: p.name}
		np.Spec.Template.Spec.Requirements = karpv1.Requirements{{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: p.capacityTypes}}
		np.Spec.Disruption.ConsolidationPolicy = karpv1.ConsolidationPolicyWhenEmptyOrUnderutilized
		np.Spec.Disruption.ConsolidateAfter = karpv1.NewDuration(30 * time.Second)
		for _, o := range []client.Object{snc, np} {
			if err := h.Client.Create(ctx, o); err != nil {
				b.Fatal(err)
			}
		}
	}
	w := newWatcher(b)
	for b.Loop() {
		run(b, w, total)
	}
}

// replicas is a workload's pod count at fraction f of the benchmark's total.
func (wl workload) replicas(total int, f float64) int32 {
	return int32(math.Round(float64(total) * wl.share * f))
}

func run(b *testing.B, w *watcher, total int) {
	want := func(f float64) (n int) {
		for _, wl := range workloads {
			n += int(wl.replicas(total, f))
		}
		return n
	}

	// The cluster before the burst: 60% of the pods, running.
	start := time.Now()
	deps := map[string]*appsv1.Deployment{}
	for _, wl := range workloads {
		deps[wl.name] = deployment(b, wl, wl.replicas(total, 0.6))
	}
	w.waitRunning(b, "the cluster before the burst", want(0.6), 60*time.Minute)
	b.ReportMetric(time.Since(start).Seconds(), "s-to-60%-running")
	claimsBefore := w.claimNames()

	// The burst: the other 40% at once.
	cpu0, req0 := capstanCPU(b), scrape(b)
	lists0 := podLists(b)
	sampler := startSampler(b)
	burst := time.Now()
	for _, wl := range workloads {
		scale(b, deps[wl.name], wl.replicas(total, 1))
	}
	w.waitRunning(b, "the burst", want(1), 60*time.Minute)
	running := time.Since(burst)
	depth := sampler.stop()
	cpu1, req1 := capstanCPU(b), scrape(b)
	lists := podLists(b) - lists0

	var lastPod time.Time
	for _, p := range w.pods() {
		if p.CreationTimestamp.After(lastPod) {
			lastPod = p.CreationTimestamp.Time
		}
	}
	ncs := w.claims()
	// The burst's claims are the provisioner's; consolidation, which may run through the burst on
	// the cluster before it, launches replacements, counted apart: they are not the burst's.
	var fresh []karpv1.NodeClaim
	replacements := 0
	var lastClaim time.Time
	for _, nc := range ncs {
		switch {
		case claimsBefore[nc.Name]:
		case nc.Annotations[disruptionplan.ReplacementAnnotationKey] != "":
			replacements++
		default:
			fresh = append(fresh, nc)
			if nc.CreationTimestamp.After(lastClaim) {
				lastClaim = nc.CreationTimestamp.Time
			}
		}
	}
	mismatched := mismatchedNodes(b, ncs)
	if len(fresh) == 0 {
		b.Fatal("the burst created no NodeClaim")
	}
	at := burst.Truncate(time.Second)
	b.ReportMetric(float64(want(1)-want(0.6)), "burst-pods")
	b.ReportMetric(lastPod.Sub(at).Seconds(), "s-to-last-pod")
	b.ReportMetric(lastClaim.Sub(at).Seconds(), "s-to-last-nodeclaim")
	// Capstan's own share: no autoscaler can plan a pod before the ReplicaSet creates it.
	b.ReportMetric(lastClaim.Sub(lastPod).Seconds(), "s-last-pod-to-last-nodeclaim")
	b.ReportMetric(running.Seconds(), "s-to-all-running")
	b.ReportMetric(float64(len(fresh)), "burst-nodeclaims")
	b.ReportMetric(float64(replacements), "replacements-during-burst")
	b.ReportMetric(float64(len(ncs)), "nodeclaims")
	b.ReportMetric(float64(mismatched), "nodes-not-their-machine")
	b.ReportMetric((cpu1 - cpu0).Seconds(), "capstan-cpu-s-burst")
	b.ReportMetric(float64(capstanPeakRSS(b))/(1<<20), "capstan-peak-rss-MiB")
	b.ReportMetric((e2e.SumMetric(req1, "rest_client_requests_total", nil)-e2e.SumMetric(req0, "rest_client_requests_total", nil))/running.Seconds(), "capstan-api-req/s-burst")
	b.ReportMetric(depth.workqueue, "max-workqueue-depth")
	b.ReportMetric(depth.pending, "max-pods-pending-in-solver")
	gets := e2e.SumMetric(req1, "rest_client_requests_total", map[string]string{"method": "GET"}) - e2e.SumMetric(req0, "rest_client_requests_total", map[string]string{"method": "GET"})
	b.ReportMetric(gets, "capstan-get-requests-burst")
	b.ReportMetric(lists, "pod-lists-burst-all-clients")
	if passes := histCount(req1, "karpenter_scheduler_scheduling_duration_seconds") - histCount(req0, "karpenter_scheduler_scheduling_duration_seconds"); passes > 0 {
		b.ReportMetric(passes, "provisioning-passes-burst")
		b.ReportMetric((histSum(req1, "karpenter_scheduler_scheduling_duration_seconds")-histSum(req0, "karpenter_scheduler_scheduling_duration_seconds"))/passes, "s-per-solve-burst")
	}
	b.Logf("burst of %d pods: last pod %.0f s, last NodeClaim %.0f s, all Running %.1f s; %d NodeClaims (%d new, %d replacements); Capstan %.1f s CPU, %d MiB peak; deepest work queue %s (%.0f)",
		want(1)-want(0.6), lastPod.Sub(at).Seconds(), lastClaim.Sub(at).Seconds(), running.Seconds(), len(ncs), len(fresh), replacements,
		(cpu1 - cpu0).Seconds(), capstanPeakRSS(b)>>20, depth.queue, depth.workqueue)

	// Checks: the figures stand only if the run was right.
	if mismatched != 0 {
		b.Errorf("%d registered NodeClaims have no Node with their allocatable", mismatched)
	}
	_, creates, err := sim.ReadFileStore(statePath)
	if err != nil {
		b.Fatal(err)
	}
	for _, nc := range ncs {
		if creates[nc.Name] != 1 {
			b.Errorf("NodeClaim %s launched %d machines", nc.Name, creates[nc.Name])
		}
	}
	// Capstan reads through its informers' caches; a read from the API server per pod (a list of
	// a node's pods, a get) would be thousands. (The API server's own count of pod LISTs is every
	// client's: kwok lists a node's pods when it takes a node, once per new machine.)
	if bound := float64(max(50, (want(1)-want(0.6))/100)); gets > bound {
		b.Errorf("Capstan sent %.0f GET requests (lists and gets) during a burst of %d pods (bound %.0f)", gets, want(1)-want(0.6), bound)
	}

	// The scale-down: every Deployment to 70% of the total, then consolidation settles.
	cost0, disrupted0 := e2e.SumMetric(req1, "capstan_nodepool_cost_dollars_per_hour", nil), e2e.SumMetric(req1, "karpenter_pods_disrupted_total", nil)
	cpu2 := capstanCPU(b)
	down := time.Now()
	for _, wl := range workloads {
		scale(b, deps[wl.name], wl.replicas(total, 0.7))
	}
	w.waitRunning(b, "the scale-down", want(0.7), 30*time.Minute)
	// Consolidation holds a higher bar for 10 minutes after a scale-down (--calm-after-scale-down),
	// so the cluster is watched past that window, until nothing has changed for two minutes.
	settled := w.waitSettled(b, down.Add(11*time.Minute), 2*time.Minute, 60*time.Minute)
	end := scrape(b)
	b.ReportMetric(settled.Sub(down).Seconds(), "s-to-consolidated")
	b.ReportMetric(e2e.SumMetric(end, "karpenter_pods_disrupted_total", nil)-disrupted0, "evictions")
	b.ReportMetric(cost0, "$/h-before-scale-down")
	b.ReportMetric(e2e.SumMetric(end, "capstan_nodepool_cost_dollars_per_hour", nil), "$/h-consolidated")
	b.ReportMetric(float64(len(w.claims())), "nodeclaims-consolidated")
	b.ReportMetric((capstanCPU(b) - cpu2).Seconds(), "capstan-cpu-s-scale-down")
	w.waitRunning(b, "the pods after consolidation", want(0.7), 30*time.Minute)
}

// mismatchedNodes counts the registered NodeClaims, not being deleted, whose Node is missing or
// has an allocatable other than the claim's. A claim or Node that consolidation is removing while
// this reads is not counted: its claim is read again from the API server.
func mismatchedNodes(b *testing.B, ncs []karpv1.NodeClaim) (n int) {
	ctx := b.Context()
	for _, nc := range ncs {
		if nc.Status.NodeName == "" || !nc.DeletionTimestamp.IsZero() {
			continue
		}
		node := &corev1.Node{}
		err := h.Client.Get(ctx, client.ObjectKey{Name: nc.Status.NodeName}, node)
		if err == nil && !node.DeletionTimestamp.IsZero() {
			continue
		}
		if err == nil && equality.Semantic.DeepEqual(node.Status.Allocatable, nc.Status.Allocatable) {
			continue
		}
		now := &karpv1.NodeClaim{}
		if gerr := h.Client.Get(ctx, client.ObjectKeyFromObject(&nc), now); apierrors.IsNotFound(gerr) || (gerr == nil && !now.DeletionTimestamp.IsZero()) {
			continue
		}
		b.Logf("NodeClaim %s: Node %s read %v, allocatable %v, the claim's %v", nc.Name, nc.Status.NodeName, err, node.Status.Allocatable, nc.Status.Allocatable)
		n++
	}
	return n
}

// deployment creates a workload's Deployment with n replicas.
func deployment(b *testing.B, wl workload, n int32) *appsv1.Deployment {
	labels := map[string]string{"app": wl.name}
	grace := int64(0)
	ps := corev1.PodSpec{
		TerminationGracePeriodSeconds: &grace,
		NodeSelector:                  map[string]string{poolLabel: wl.pool},
		Containers: []corev1.Container{{Name: "app", Image: "pause", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(wl.cpu), corev1.ResourceMemory: resource.MustParse(wl.mem)}}}},
	}
	if wl.constrain != nil {
		wl.constrain(&ps, labels)
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: wl.name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &n, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: ps}},
	}
	if err := h.Client.Create(b.Context(), d); err != nil {
		b.Fatal(err)
	}
	return d
}

func scale(b *testing.B, d *appsv1.Deployment, n int32) {
	patch := client.RawPatch("application/merge-patch+json", fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, n))
	if err := h.Client.Patch(b.Context(), d.DeepCopy(), patch); err != nil {
		b.Fatal(err)
	}
}

// watcher follows the benchmark's pods and the NodeClaims through an informer cache, so that
// waiting for tens of thousands of pods does not list them from the API server again and again.
type watcher struct {
	cache cache.Cache
}

func newWatcher(b *testing.B) *watcher {
	sch, err := scheme.New()
	if err != nil {
		b.Fatal(err)
	}
	c, err := cache.New(h.Cluster.Config, cache.Options{Scheme: sch, DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Namespaces: map[string]cache.Config{"default": {}}}}})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go func() { _ = c.Start(ctx) }()
	for _, o := range []client.Object{&corev1.Pod{}, &karpv1.NodeClaim{}} {
		if _, err := c.GetInformer(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the benchmark's cache did not sync")
	}
	return &watcher{cache: c}
}

func (w *watcher) pods() []corev1.Pod {
	l := &corev1.PodList{}
	_ = w.cache.List(context.Background(), l, client.InNamespace("default"))
	return l.Items
}

func (w *watcher) claims() []karpv1.NodeClaim {
	l := &karpv1.NodeClaimList{}
	_ = w.cache.List(context.Background(), l)
	return l.Items
}

func (w *watcher) claimNames() map[string]bool {
	out := map[string]bool{}
	for _, nc := range w.claims() {
		out[nc.Name] = true
	}
	return out
}

// waitRunning waits until exactly n of the benchmark's pods run on a node and none is pending
// or being deleted; the timeout only bounds a broken run.
func (w *watcher) waitRunning(b *testing.B, what string, n int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		running, other := 0, 0
		for _, p := range w.pods() {
			if p.Status.Phase == corev1.PodRunning && p.Spec.NodeName != "" && p.DeletionTimestamp.IsZero() {
				running++
			} else {
				other++
			}
		}
		if running == n && other == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d pods running, %d others, after %s", what, running, n, other, timeout)
		}
		time.Sleep(time.Second)
	}
}

// waitSettled waits until it is past notBefore and no NodeClaim has been created or deleted for
// quiet, and returns when the last change was seen.
func (w *watcher) waitSettled(b *testing.B, notBefore time.Time, quiet, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	last, lastKey := time.Now(), ""
	for {
		var names []string
		for _, nc := range w.claims() {
			names = append(names, nc.Name+fmt.Sprint(nc.DeletionTimestamp.IsZero()))
		}
		slices.Sort(names) // the cache lists in no set order
		key := strings.Join(names, ",")
		if key != lastKey {
			last, lastKey = time.Now(), key
		}
		if time.Since(last) >= quiet && time.Now().After(notBefore) {
			return last
		}
		if time.Now().After(deadline) {
			b.Fatalf("consolidation did not settle within %s", timeout)
		}
		time.Sleep(2 * time.Second)
	}
}

// scrape reads the running Capstan's /metrics.
func scrape(b *testing.B) map[string]*dto.MetricFamily {
	mf, err := capstanMetrics()
	if err != nil {
		b.Fatal(err)
	}
	return mf
}

// capstanMetrics reads and parses the running Capstan's /metrics.
func capstanMetrics() (map[string]*dto.MetricFamily, error) { return e2e.ScrapeMetrics(metricsAddr) }

// histCount and histSum add a histogram family's observation counts and sums.
func histCount(mf map[string]*dto.MetricFamily, name string) (n float64) {
	for _, m := range mf[name].GetMetric() {
		n += float64(m.GetHistogram().GetSampleCount())
	}
	return n
}

func histSum(mf map[string]*dto.MetricFamily, name string) (n float64) {
	for _, m := range mf[name].GetMetric() {
		n += m.GetHistogram().GetSampleSum()
	}
	return n
}

// podLists is how many pod LIST requests the API server has answered since it started (every
// client's: its own metric has no client label).
func podLists(b *testing.B) float64 {
	cs, err := kubernetes.NewForConfig(h.Cluster.Config)
	if err != nil {
		b.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	mf, err := e2e.ParseMetrics(bytes.NewReader(raw))
	if err != nil {
		b.Fatal(err)
	}
	return e2e.SumMetric(mf, "apiserver_request_total", map[string]string{"verb": "LIST", "resource": "pods"})
}

// depths are the deepest queues a sampler saw: controller-runtime's work queues (which one) and
// the pods waiting in the provisioner.
type depths struct {
	workqueue, pending float64
	queue              string
}

type sampler struct {
	stopCh chan struct{}
	wg     sync.WaitGroup
	got    depths
}

// startSampler reads Capstan's queue depths every two seconds until stopped.
func startSampler(b *testing.B) *sampler {
	s := &sampler{stopCh: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-s.stopCh:
				return
			case <-t.C:
			}
			mf, err := capstanMetrics()
			if err != nil {
				continue
			}
			for _, m := range mf["workqueue_depth"].GetMetric() {
				if v := m.GetGauge().GetValue(); v > s.got.workqueue {
					s.got.workqueue = v
					for _, l := range m.GetLabel() {
						if l.GetName() == "name" {
							s.got.queue = l.GetValue()
						}
					}
				}
			}
			s.got.pending = max(s.got.pending, e2e.SumMetric(mf, "karpenter_scheduler_queue_depth", nil))
		}
	}()
	return s
}

func (s *sampler) stop() depths {
	close(s.stopCh)
	s.wg.Wait()
	return s.got
}

func capstanCPU(b *testing.B) time.Duration {
	d, err := e2e.ProcessCPU(h.Cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return d
}

func capstanPeakRSS(b *testing.B) int64 {
	n, err := e2e.ProcessPeakRSS(h.Cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return n
}
