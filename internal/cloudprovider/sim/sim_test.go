package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	simv1alpha1 "capstan.dev/capstan/api/sim/v1alpha1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

func nodeClass(t *testing.T, name string, mutate func(*simv1alpha1.SimNodeClass)) *simv1alpha1.SimNodeClass {
	t.Helper()
	snc := &simv1alpha1.SimNodeClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: simv1alpha1.SimNodeClassSpec{InstanceTypes: []string{"m5.large", "m5.xlarge", "c5.large"}}}
	if mutate != nil {
		mutate(snc)
	}
	if err := env.Client.Create(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), snc) })
	return snc
}

func claim(name, class string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) *karpv1.NodeClaim {
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"team": "a"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: class},
			Requirements: reqs,
			Resources:    karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
			Taints:       []corev1.Taint{{Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}},
		},
	}
}

func newProvider(t *testing.T, clk *clocktesting.FakeClock, path string) *Provider {
	t.Helper()
	cloud, err := NewCloud(clk, path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProvider(env.Client, cloud, clk, unavailable.New(clk, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCreateLaunchesTheCheapestOfferingOnceAndRegisters(t *testing.T) {
	nodeClass(t, "basic", nil)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	statePath := filepath.Join(t.TempDir(), "cloud.json")
	p := newProvider(t, clk, statePath)
	nc := claim("basic-1", "basic", karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}})

	got, err := p.Create(t.Context(), nc)
	if err != nil {
		t.Fatal(err)
	}
	// c5.large ($0.085) is cheaper than m5.large ($0.096) and holds 1 CPU.
	if it := got.Labels[karpv1.InstanceTypeLabelKey]; it != "c5.large" {
		t.Fatalf("launched %s, want the cheapest fitting type c5.large", it)
	}
	if got.Labels[karpv1.CapacityTypeLabelKey] != "on-demand" || got.Status.ProviderID == "" || got.Status.Allocatable.Cpu().IsZero() {
		t.Fatalf("claim status %+v labels %v", got.Status, got.Labels)
	}
	// A retry, or a restarted controller reading the same state, gets the same machine.
	again, err := p.Create(t.Context(), nc)
	if err != nil || again.Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("second Create: %v, %s vs %s", err, again.Status.ProviderID, got.Status.ProviderID)
	}
	restarted := newProvider(t, clk, statePath)
	third, err := restarted.Create(t.Context(), nc)
	if err != nil || third.Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("Create after restart: %v, %s vs %s", err, third.Status.ProviderID, got.Status.ProviderID)
	}
	if n := len(restarted.Cloud().Instances()); n != 1 || restarted.Cloud().CreateCount(nc.Name) != 0 {
		t.Fatalf("%d machines for one NodeClaim, %d launched after the restart; want the one from before", n, restarted.Cloud().CreateCount(nc.Name))
	}
	if _, creates, err := ReadFileStore(statePath); err != nil || creates[nc.Name] != 1 {
		t.Fatalf("the state file counts %d launches for the claim, want 1 (%v)", creates[nc.Name], err)
	}

	// Registration happens after launch + registration delay (1s + 2s by default).
	if err := env.Client.Create(t.Context(), nc.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: nc.Name}})
	})
	j := &Joiner{Cloud: restarted.Cloud(), Client: env.Client}
	clk.Step(2 * time.Second)
	if err := j.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: nc.Name}, node); err == nil {
		t.Fatal("the node registered before its delay")
	}
	clk.Step(time.Second)
	if err := j.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: nc.Name}, node); err != nil {
		t.Fatalf("node not registered: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
	if node.Spec.ProviderID != got.Status.ProviderID || node.Annotations[KwokNodeAnnotation] != "fake" || node.Labels["team"] != "a" {
		t.Fatalf("node %+v", node.ObjectMeta)
	}
	var unregistered, workload bool
	for _, tn := range node.Spec.Taints {
		unregistered = unregistered || tn.Key == karpv1.UnregisteredTaintKey
		workload = workload || tn.Key == "workload"
	}
	if !unregistered || !workload {
		t.Fatalf("node taints %v lack the unregistered or the claim's taint", node.Spec.Taints)
	}
	if node.Status.Allocatable.Cpu().Cmp(*got.Status.Allocatable.Cpu()) != 0 {
		t.Fatalf("node allocatable %v, claim %v", node.Status.Allocatable, got.Status.Allocatable)
	}

	// Delete terminates; then Get and Delete say not found.
	if err := restarted.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	if _, err := restarted.Get(t.Context(), got.Status.ProviderID); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Fatalf("Get after Delete: %v", err)
	}
	if err := restarted.Delete(t.Context(), got); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Fatalf("second Delete: %v", err)
	}
	// Another cloud's provider ID names no machine here (Karpenter's regression spec "should
	// succeed to garbage collect an Instance that was launched by a NodeClaim but has no Instance
	// mapping" writes one on a claim): not found, so garbage collection deletes the claim.
	if _, err := restarted.Get(t.Context(), "Provider:///AZ/i-01234567890123456"); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Fatalf("Get of another cloud's provider ID: %v", err)
	}
}

func TestInjectedFailures(t *testing.T) {
	nodeClass(t, "faulty", func(s *simv1alpha1.SimNodeClass) {
		s.Spec.Zones = []string{"zone-a"}
		s.Spec.Failures.InsufficientCapacity = []simv1alpha1.OfferingSelector{{InstanceType: "c5.large"}}
		s.Spec.Failures.NeverRegister = []simv1alpha1.OfferingSelector{{InstanceType: "m5.large"}}
	})
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProvider(t, clk, "")
	od := karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}

	got, err := p.Create(t.Context(), claim("faulty-1", "faulty", od))
	if err != nil {
		t.Fatal(err)
	}
	if it := got.Labels[karpv1.InstanceTypeLabelKey]; it != "m5.large" {
		t.Fatalf("launched %s, want m5.large after c5.large's insufficient capacity", it)
	}
	// The failed offering is now reported unavailable.
	its, err := p.InstanceTypes(t.Context(), &simv1alpha1.SimNodeClass{Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"c5.large"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range its[0].Offerings {
		if o.CapacityType == "on-demand" && o.Available {
			t.Fatal("c5.large on-demand still available after insufficient capacity")
		}
	}
	// m5.large never registers.
	clk.Step(time.Hour)
	j := &Joiner{Cloud: p.Cloud(), Client: env.Client}
	if err := j.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "faulty-1"}, &corev1.Node{}); err == nil {
		t.Fatal("a never-registering machine registered")
	}
	// Only c5.large allowed: insufficient capacity.
	only := karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"c5.large"}}
	if _, err := p.Create(t.Context(), claim("faulty-2", "faulty", only)); !cloudprovider.IsInsufficientCapacity(err) {
		t.Fatalf("err = %v, want insufficient capacity", err)
	}
	// An unknown NodeClass.
	if _, err := p.Create(t.Context(), claim("faulty-3", "missing")); !cloudprovider.IsNodeClassNotReady(err) {
		t.Fatalf("err = %v, want NodeClassNotReady", err)
	}
}

// A shortage lets as many machines of an offering run as it says, counted across classes; the
// launch beyond answers insufficient capacity there and falls back to the next offering, and a
// machine terminated makes room again.
func TestShortageRunsDry(t *testing.T) {
	short := func(s *simv1alpha1.SimNodeClass) {
		s.Spec.Zones = []string{"zone-a"}
		s.Spec.Failures.Shortages = []simv1alpha1.OfferingShortage{{OfferingSelector: simv1alpha1.OfferingSelector{InstanceType: "c5.large", CapacityType: "on-demand"}, Machines: 2}}
	}
	nodeClass(t, "short-a", short)
	nodeClass(t, "short-b", short)
	clk := clocktesting.NewFakeClock(time.Now())
	p := newProvider(t, clk, "")
	od := karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"on-demand"}}
	var launched []*karpv1.NodeClaim
	for i, class := range []string{"short-a", "short-b", "short-b"} {
		got, err := p.Create(t.Context(), claim(fmt.Sprintf("short-%d", i), class, od))
		if err != nil {
			t.Fatal(err)
		}
		launched = append(launched, got)
	}
	var types []string
	for _, nc := range launched {
		types = append(types, nc.Labels[karpv1.InstanceTypeLabelKey])
	}
	if want := []string{"c5.large", "c5.large", "m5.large"}; !slices.Equal(types, want) {
		t.Fatalf("launched %v, want %v: two c5.large machines in the account, then the next offering", types, want)
	}
	// The dry offering is marked unavailable, as an insufficient-capacity answer marks it.
	its, err := p.InstanceTypes(t.Context(), &simv1alpha1.SimNodeClass{Spec: simv1alpha1.SimNodeClassSpec{Zones: []string{"zone-a"}, InstanceTypes: []string{"c5.large"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range its[0].Offerings {
		if o.CapacityType == "on-demand" && o.Available {
			t.Fatal("c5.large on-demand still available after running dry")
		}
	}
	// Only c5.large allowed: insufficient capacity, until a machine is terminated.
	only := karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"c5.large"}}
	if _, err := p.Create(t.Context(), claim("short-3", "short-a", od, only)); !cloudprovider.IsInsufficientCapacity(err) {
		t.Fatalf("err = %v, want insufficient capacity", err)
	}
	if err := p.Delete(t.Context(), launched[0]); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute) // the unavailable mark expires
	got, err := p.Create(t.Context(), claim("short-4", "short-a", od, only))
	if err != nil {
		t.Fatalf("a terminated machine left no room: %v", err)
	}
	if it := got.Labels[karpv1.InstanceTypeLabelKey]; it != "c5.large" {
		t.Fatalf("launched %s, want c5.large", it)
	}
}

// The SimNodeClass's kubelet settings decide its types' pod capacity, as an EC2NodeClass's do.
func TestKubeletMaxPodsAndPodsPerCore(t *testing.T) {
	snc := nodeClass(t, "kubelet", func(snc *simv1alpha1.SimNodeClass) {
		maxPods, perCore := int32(110), int32(20)
		snc.Spec.Kubelet = &simv1alpha1.KubeletConfiguration{MaxPods: &maxPods, PodsPerCore: &perCore}
	})
	p := newProvider(t, clocktesting.NewFakeClock(time.Now()), "")
	its, err := p.InstanceTypes(t.Context(), snc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"m5.large": 40, "m5.xlarge": 80, "c5.large": 40}
	for _, it := range its {
		alloc := it.Allocatable()
		if got := alloc.Pods().Value(); got != want[it.Name] {
			t.Errorf("%s pods %d, want %d (min of maxPods 110 and 20 per vCPU)", it.Name, got, want[it.Name])
		}
	}
}

// With the state in ConfigMaps, a new replica (the next leader) sees the machines the previous
// one launched and registered, and terminating removes them for everyone.
func TestConfigMapStoreSurvivesAFailover(t *testing.T) {
	nodeClass(t, "failover", nil)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "sim-store-"}}
	if err := env.Client.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	store := func() Store {
		return &ConfigMapStore{Client: env.Client, Reader: env.Client, Namespace: ns.Name, Cluster: "test"}
	}
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	provider := func() *Provider {
		p, err := NewProvider(env.Client, NewCloudWithStore(clk, store()), clk, unavailable.New(clk, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := provider()
	nc := claim("failover-1", "failover")
	got, err := first.Create(t.Context(), nc)
	if err != nil {
		t.Fatal(err)
	}
	inst := first.Cloud().Instances()[0]
	if err := first.Cloud().markRegistered(inst.ID); err != nil {
		t.Fatal(err)
	}

	second := provider()
	listed, err := second.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 1 || listed[0].Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("the next leader lists %d machine(s), want the one launched before", len(listed))
	}
	if !second.Cloud().Instances()[0].Registered {
		t.Fatal("the registration was lost in the failover")
	}
	again, err := second.Create(t.Context(), nc)
	if err != nil || again.Status.ProviderID != got.Status.ProviderID {
		t.Fatalf("Create after failover: %v; a second machine for one NodeClaim", err)
	}
	// A launch after the failover gets a fresh id.
	other, err := second.Create(t.Context(), claim("failover-2", "failover"))
	if err != nil || other.Status.ProviderID == got.Status.ProviderID {
		t.Fatalf("second claim: %v, %s", err, other.Status.ProviderID)
	}
	if err := second.Delete(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	third := provider()
	left, err := third.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0].Status.ProviderID != other.Status.ProviderID {
		t.Fatalf("after termination %d machine(s) left, want only failover-2's", len(left))
	}
}

// noStatusWrites fails every status write, so a test can show the Node is registered complete.
type noStatusWrites struct{ client.Client }

func (c noStatusWrites) Status() client.SubResourceWriter { return failingStatus{} }

type failingStatus struct{ client.SubResourceWriter }

func (failingStatus) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return errors.New("status written after create")
}

// The Node appears with the machine's capacity and allocatable in the same call that creates
// it, as a kubelet registers, so nothing (kwok) can fill in placeholders in between.
func TestNodeIsRegisteredWithItsStatusInOneCall(t *testing.T) {
	nodeClass(t, "onecall", nil)
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC))
	p := newProvider(t, clk, "")
	nc := claim("onecall-1", "onecall")
	got, err := p.Create(t.Context(), nc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.Delete(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "onecall-1"}})
	})
	clk.Step(time.Minute)
	j := &Joiner{Cloud: p.Cloud(), Client: noStatusWrites{env.Client}}
	if err := j.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "onecall-1"}, node); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(node.Status.Allocatable, got.Status.Allocatable) || node.Status.Capacity.Cpu().IsZero() {
		t.Fatalf("registered node allocatable %v capacity %v, want the machine's %v", node.Status.Allocatable, node.Status.Capacity, got.Status.Allocatable)
	}
}

// Instance types are built once per SimNodeClass generation: a spec change (a price override
// here) is seen at once, offerings marked unavailable after the build are reported so, and what
// one caller changes in its answer does not reach the next caller's.
func TestInstanceTypesFollowTheClassAndAvailability(t *testing.T) {
	snc := nodeClass(t, "rebuilt", func(s *simv1alpha1.SimNodeClass) { s.Spec.Zones = []string{"zone-a"} })
	clk := clocktesting.NewFakeClock(time.Now())
	cloud, err := NewCloud(clk, "")
	if err != nil {
		t.Fatal(err)
	}
	unavail := unavailable.New(clk, time.Minute)
	p, err := NewProvider(env.Client, cloud, clk, unavail)
	if err != nil {
		t.Fatal(err)
	}
	price := func(its []*cloudprovider.InstanceType, name, ct string) (float64, bool) {
		for _, it := range its {
			for _, o := range it.Offerings {
				if it.Name == name && o.CapacityType == ct {
					return o.Price, o.Available
				}
			}
		}
		t.Fatalf("no %s %s offering", name, ct)
		return 0, false
	}
	first, err := p.InstanceTypes(t.Context(), snc)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := price(first, "m5.large", "on-demand")
	// A caller scribbling on its answer.
	for _, it := range first {
		for i := range it.Offerings {
			it.Offerings[i].Price, it.Offerings[i].Available = 0, false
		}
	}
	again, err := p.InstanceTypes(t.Context(), snc)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := price(again, "m5.large", "on-demand"); got != before || !ok {
		t.Fatalf("second answer m5.large on-demand %v available %v; want %v available (the first caller's changes leaked)", got, ok, before)
	}
	unavail.MarkUnavailable(cloudprovider.OfferingKey{InstanceType: "m5.large", Zone: "zone-a", CapacityType: "on-demand"})
	its, err := p.InstanceTypes(t.Context(), snc)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := price(its, "m5.large", "on-demand"); ok {
		t.Fatal("m5.large on-demand still available after being marked unavailable")
	}
	snc.Spec.PriceOverrides = []simv1alpha1.PriceOverride{{OfferingSelector: simv1alpha1.OfferingSelector{InstanceType: "c5.large", CapacityType: "on-demand"}, Price: "0.01"}}
	if err := env.Client.Update(t.Context(), snc); err != nil {
		t.Fatal(err)
	}
	its, err = p.InstanceTypes(t.Context(), snc)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := price(its, "c5.large", "on-demand"); got != 0.01 {
		t.Fatalf("c5.large on-demand %v after the class's override to 0.01", got)
	}
}

// The file store's journal: each change is one appended line; a file of the earlier one-snapshot
// format loads; a line cut short by a crash is ignored and the next write starts from a
// snapshot; a long journal is compacted, and nothing is lost on the way.
func TestFileStoreJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cloud.json")
	old := `{"instances":{"i-1":{"id":"i-1","nodeClaim":"a"}},"creates":{"a":1}}`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	f := &FileStore{Path: path}
	got, err := f.Load()
	if err != nil || len(got) != 1 || got[0].ID != "i-1" {
		t.Fatalf("loading the earlier format: %v, %v", got, err)
	}
	if err := f.Put(&Instance{ID: "i-2", NodeClaim: "b"}); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(&Instance{ID: "i-2", NodeClaim: "b", Zone: "zone-a"}); err != nil { // an update, not a launch
		t.Fatal(err)
	}
	if err := f.Delete("i-1"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if lines := bytes.Count(b, []byte("\n")); lines != 3 {
		t.Fatalf("%d lines after three changes to a one-line file; want 3 appended lines after it\n%s", lines, b)
	}
	// A crash in the middle of a write.
	if err := os.WriteFile(path, append(b, []byte(`{"put":{"id":"i-3","nodeCl`)...), 0o600); err != nil {
		t.Fatal(err)
	}
	instances, creates, err := ReadFileStore(path)
	if err != nil || len(instances) != 1 || instances["i-2"].Zone != "zone-a" || creates["a"] != 1 || creates["b"] != 1 {
		t.Fatalf("after a cut line: %v %v %v; want i-2 (zone-a) with one launch each for a and b", instances, creates, err)
	}
	f = &FileStore{Path: path}
	if _, err := f.Load(); err != nil {
		t.Fatal(err)
	}
	if err := f.Put(&Instance{ID: "i-4", NodeClaim: "d"}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if err := f.Put(&Instance{ID: fmt.Sprintf("i-x%d", i%5), NodeClaim: fmt.Sprintf("x%d", i%5)}); err != nil {
			t.Fatal(err)
		}
	}
	b, _ = os.ReadFile(path)
	if lines := bytes.Count(b, []byte("\n")); lines > 101 {
		t.Fatalf("%d lines for 7 machines: the journal was not compacted", lines)
	}
	instances, creates, err = ReadFileStore(path)
	if err != nil || len(instances) != 7 || creates["d"] != 1 || creates["x3"] != 1 || creates["a"] != 1 {
		t.Fatalf("after compaction: %d machines, creates %v, %v; want 7 machines and every launch counted once", len(instances), creates, err)
	}
}

// A machine whose Node cannot be created does not keep the others of the same Sync from
// registering; Sync reports it, and it is tried again on the next.
func TestJoinerRegistersTheRestWhenOneFails(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	cloud, err := NewCloud(clk, "")
	if err != nil {
		t.Fatal(err)
	}
	// "Bad_Name" is no valid Node name: the API server refuses it. It is launched first, so it
	// comes first in Sync's order.
	var bad string
	for _, claim := range []string{"Bad_Name", "joiner-good"} {
		inst, err := cloud.launch(claim, nil, func(id string) *Instance {
			return &Instance{ID: id, NodeClaim: claim, Zone: "zone-a", Labels: map[string]string{},
				Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}, Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
				LaunchedAt: clk.Now(), RegisterAt: clk.Now()}
		})
		if err != nil {
			t.Fatal(err)
		}
		if bad == "" {
			bad = inst.ID
		}
	}
	j := &Joiner{Cloud: cloud, Client: env.Client}
	err = j.Sync(t.Context())
	if err == nil || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Sync error %v; want the failed registration reported", err)
	}
	node := &corev1.Node{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "joiner-good"}, node); err != nil {
		t.Fatalf("the good machine did not register after another failed: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), node) })
}

// A class reading a kwok menu offers the menu's zones (CRD-defaulted spec.zones are not its): a
// machine launched from it is not drifted, and one whose type or zone left the menu is.
func TestDriftFollowsTheMenuOfInstanceTypesFrom(t *testing.T) {
	ctx := t.Context()
	const menu = `[{"name": "c-4x", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "4", "memory": "8Gi", "pods": "110"},
 "offerings": [{"Price": 0.03, "Available": true, "Requirements": [
   {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
   {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}]`
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "drift-menu"}, Data: map[string]string{"instance_types.json": menu}}
	if err := env.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	snc := nodeClass(t, "drift-menu", func(s *simv1alpha1.SimNodeClass) {
		s.Spec.InstanceTypes = nil
		s.Spec.InstanceTypesFrom = &simv1alpha1.InstanceTypesSource{ConfigMap: simv1alpha1.ConfigMapKeyReference{Namespace: "default", Name: "drift-menu"}}
	})
	clk := clocktesting.NewFakeClock(time.Now())
	cloud, err := NewCloud(clk, "")
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProvider(env.Client, cloud, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := &simv1alpha1.SimNodeClass{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(snc), got); err != nil {
		t.Fatal(err)
	}
	launched, err := p.Create(ctx, claim("drift-menu-a", "drift-menu"))
	if err != nil {
		t.Fatal(err)
	}
	nc := claim("drift-menu-a", "drift-menu")
	nc.Labels = launched.Labels
	if reason, err := p.IsDrifted(ctx, nc); err != nil || reason != "" {
		t.Fatalf("a machine just launched from the menu (zone %s; class zones %v): drift %q, %v", nc.Labels[karpv1.ZoneLabelKey], got.Spec.Zones, reason, err)
	}
	nc.Labels[karpv1.ZoneLabelKey] = "test-zone-z"
	if reason, _ := p.IsDrifted(ctx, nc); reason != "ZoneNotOffered" {
		t.Errorf("zone not in the menu: %q", reason)
	}
	nc.Labels[karpv1.InstanceTypeLabelKey] = "c-99x"
	if reason, _ := p.IsDrifted(ctx, nc); reason != "InstanceTypeNotOffered" {
		t.Errorf("type not in the menu: %q", reason)
	}
}

// pinned is a claim pinned to a capacity reservation, as the planner writes it.
func pinned(name, class, reservation string) *karpv1.NodeClaim {
	in := func(k, v string) karpv1.NodeSelectorRequirementWithMinValues {
		return karpv1.NodeSelectorRequirementWithMinValues{Key: k, Operator: karpv1.NodeSelectorOpIn, Values: []string{v}}
	}
	return claim(name, class, in(karpv1.CapacityTypeLabelKey, karpv1.CapacityTypeReserved), in(cloudprovider.ReservationIDLabelKey, reservation),
		in(karpv1.InstanceTypeLabelKey, "m5.large"), in(karpv1.ZoneLabelKey, "zone-a"))
}

// A capacity reservation is offered as reserved capacity while it lasts, is launched into only
// by claims pinned to it, and never holds more machines than its count — also when the claims
// come at once.
func TestCapacityReservationsHoldTheirCountAndNoMore(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	ended := metav1.NewTime(clk.Now().Add(-time.Hour))
	nodeClass(t, "reserved", func(snc *simv1alpha1.SimNodeClass) {
		snc.Spec.CapacityReservations = []simv1alpha1.SimCapacityReservation{
			{ID: "cr-a1", InstanceType: "m5.large", Zone: "zone-a", Count: 2},
			{ID: "cr-old", InstanceType: "m5.large", Zone: "zone-a", Count: 5, ReservationType: "capacity-block", EndTime: &ended},
		}
	})
	p := newProvider(t, clk, "")
	its, err := p.GetInstanceTypes(t.Context(), &karpv1.NodePool{Spec: karpv1.NodePoolSpec{Template: karpv1.NodeClaimTemplate{Spec: karpv1.NodeClaimTemplateSpec{
		NodeClassRef: &karpv1.NodeClassReference{Group: simv1alpha1.Group, Kind: "SimNodeClass", Name: "reserved"}}}}})
	if err != nil {
		t.Fatal(err)
	}
	offered := map[string]cloudprovider.Offering{}
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.ReservationID != "" {
				if it.Name != "m5.large" || o.Zone != "zone-a" || o.CapacityType != karpv1.CapacityTypeReserved {
					t.Fatalf("reservation %s offered as %s %s %s", o.ReservationID, it.Name, o.Zone, o.CapacityType)
				}
				offered[o.ReservationID] = o
			}
		}
	}
	if o := offered["cr-a1"]; !o.Available || o.ReservationCapacity != 2 || o.Price > 0.001 {
		t.Fatalf("cr-a1 offered as %+v, want available, 2 machines, near-zero price", o)
	}
	if o, ok := offered["cr-old"]; !ok || o.Available {
		t.Fatalf("the ended cr-old offered as %+v (present: %v), want unavailable", o, ok)
	}

	// A claim not pinned to a reservation does not take its room, however cheap.
	free, err := p.Create(t.Context(), claim("free", "reserved", karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.InstanceTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{"m5.large"}}))
	if err != nil {
		t.Fatal(err)
	}
	if ct := free.Labels[karpv1.CapacityTypeLabelKey]; ct == karpv1.CapacityTypeReserved || free.Labels[cloudprovider.ReservationIDLabelKey] != "" {
		t.Fatalf("an unpinned claim launched as %s into %q", ct, free.Labels[cloudprovider.ReservationIDLabelKey])
	}

	// Three claims pinned to a reservation of two, at once: two machines, one refusal.
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			nc, err := p.Create(t.Context(), pinned(fmt.Sprintf("held-%d", i), "reserved", "cr-a1"))
			if err == nil && (nc.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeReserved ||
				nc.Labels[cloudprovider.ReservationIDLabelKey] != "cr-a1" || nc.Labels[cloudprovider.ReservationTypeLabelKey] != "default") {
				err = fmt.Errorf("launched with labels %v", nc.Labels)
			}
			errs <- err
		}()
	}
	refused := 0
	for range 3 {
		err := <-errs
		var ice *cloudprovider.InsufficientCapacityError
		switch {
		case errors.As(err, &ice):
			refused++
			if len(ice.Offerings) != 1 || ice.Offerings[0].ReservationID != "cr-a1" {
				t.Fatalf("refusal names %v, want the reservation cr-a1", ice.Offerings)
			}
		case err != nil:
			t.Fatal(err)
		}
	}
	if refused != 1 || p.Cloud().InReservation("cr-a1") != 2 {
		t.Fatalf("%d refused, %d machines in cr-a1; want 1 and 2", refused, p.Cloud().InReservation("cr-a1"))
	}
	if _, err := p.Create(t.Context(), pinned("late", "reserved", "cr-old")); err == nil {
		t.Fatal("a claim pinned to an ended reservation launched")
	}
}
