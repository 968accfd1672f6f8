package aws_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/api/karpenter/v1alpha1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/cloudprovider/unavailable"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/internal/overlay"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// resolved stores the class under a name unique to the test and resolves it; it must turn Ready.
func resolved(t *testing.T, f *awstest.Fixture, nc *awsv1.EC2NodeClass) *awsv1.EC2NodeClass {
	t.Helper()
	nc.Name = strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))
	got, err := reconciled(t, f, nc)
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, awsv1.ConditionTypeReady) {
		t.Fatalf("class not ready: %+v", got.Status.Conditions)
	}
	return got
}

// reconciled stores the class under its name, lets the EC2NodeClass controller resolve it once
// and reads it back, with the reconcile's error (a resolution failure is also in its conditions).
func reconciled(t *testing.T, f *awstest.Fixture, nc *awsv1.EC2NodeClass) (*awsv1.EC2NodeClass, error) {
	t.Helper()
	ctx := context.Background()
	if err := env.Client.Create(ctx, nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		got := &awsv1.EC2NodeClass{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(nc), got) == nil {
			got.Finalizers = nil
			_ = env.Client.Update(ctx, got)
			_ = env.Client.Delete(ctx, got)
		}
	})
	c := &ec2nodeclass.Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	_, rerr := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)})
	got := &awsv1.EC2NodeClass{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nc), got); err != nil {
		t.Fatal(err)
	}
	return got, rerr
}

// claimFor is a NodeClaim of the pool asking for requests.
func claimFor(nc *awsv1.EC2NodeClass, np *karpv1.NodePool, name string, requests corev1.ResourceList) *karpv1.NodeClaim {
	reqs := []karpv1.NodeSelectorRequirementWithMinValues{}
	for _, r := range np.Spec.Template.Spec.Requirements {
		reqs = append(reqs, r)
	}
	reqs = append(reqs, karpv1.NodeSelectorRequirementWithMinValues{Key: karpv1.NodePoolLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{np.Name}})
	return &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name),
			Labels: map[string]string{karpv1.NodePoolLabelKey: np.Name, "workload": "orders"}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: awsv1.Group, Kind: "EC2NodeClass", Name: nc.Name},
			Requirements: reqs, Taints: np.Spec.Template.Spec.Taints,
			Resources: karpv1.ResourceRequirements{Requests: requests},
		},
	}
}

func TestOrdersLaunchIsOneFleetOfCurrentOnDemandTypes(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	claim := claimFor(nc, np, "orders-a", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("6Gi")})
	got, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	fleets := f.AWS.Requests("CreateFleet")
	if len(fleets) != 1 {
		t.Fatalf("%d CreateFleet calls, want 1", len(fleets))
	}
	form := fleets[0].Form
	if form.Get("Type") != "instant" || form.Get("TargetCapacitySpecification.DefaultTargetCapacityType") != "on-demand" ||
		form.Get("OnDemandOptions.AllocationStrategy") != "lowest-price" || form.Get("TargetCapacitySpecification.TotalTargetCapacity") != "1" {
		t.Errorf("fleet request: %v", form)
	}
	// Every override is an amd64 c, m or r type of generation > 5 that fits the claim.
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]string{}
	for _, e := range entries {
		labels[e.Name] = e.Labels
	}
	n := 0
	for k, v := range form {
		if !strings.HasSuffix(k, ".InstanceType") {
			continue
		}
		n++
		l := labels[v[0]]
		gen, _ := strconv.Atoi(l[awsv1.LabelInstanceGeneration])
		if !slices.Contains([]string{"c", "m", "r"}, l[awsv1.LabelInstanceCategory]) || gen <= 5 || l[corev1.LabelArchStable] != "amd64" {
			t.Errorf("override %s: %s", k, v[0])
		}
	}
	if n == 0 || n > aws.MaxInstanceTypes*3 {
		t.Errorf("%d overrides", n)
	}
	// The template requires IMDSv2 with a hop limit of 1 and boots the pinned image.
	lts := f.AWS.LaunchTemplates()
	if len(lts) != 1 {
		t.Fatalf("%d launch templates", len(lts))
	}
	for _, lt := range lts {
		if lt.Data["MetadataOptions.HttpTokens"] != "required" || lt.Data["MetadataOptions.HttpPutResponseHopLimit"] != "1" ||
			lt.Data["ImageId"] != nc.Spec.AMISelectorTerms[0].ID || lt.Data["IamInstanceProfile.Name"] != nc.Status.InstanceProfile ||
			lt.Data["SecurityGroupId.1"] != "sg-0nodes00000000001" {
			t.Errorf("launch template data %v", lt.Data)
		}
		config, flags, err := awsfake.ParseUserData(lt.Data["UserData"])
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(flags, "--register-with-taints=karpenter.sh/unregistered=:NoExecute,workload=orders:NoSchedule") ||
			!slices.ContainsFunc(flags, func(s string) bool {
				return strings.Contains(s, "workload=orders") && strings.HasPrefix(s, "--node-labels=")
			}) {
			t.Errorf("kubelet flags %v", flags)
		}
		if len(config) != 0 {
			t.Errorf("kubelet config %v: the class sets none; nodeadm derives it per type", config)
		}
	}
	// The instance carries the class's tags and Capstan's.
	insts := f.AWS.LiveInstances(aws.NodeClaimTag, "orders-a")
	if len(insts) != 1 {
		t.Fatalf("%d instances for the claim", len(insts))
	}
	tags := insts[0].Tags
	for k, v := range map[string]string{"Team": "commerce", "Environment": "staging", "karpenter.sh/nodepool": "orders", "karpenter.sh/nodeclaim": "orders-a",
		"kubernetes.io/cluster/" + awstest.Cluster: "owned", "eks:eks-cluster-name": awstest.Cluster, "karpenter.k8s.aws/ec2nodeclass": nc.Name} {
		if tags[k] != v {
			t.Errorf("tag %s=%q, want %q", k, tags[k], v)
		}
	}
	// The claim's view: provider ID, type labels, capacity, and the cheapest fitting type.
	if got.Status.ProviderID != insts[0].ProviderID() || got.Labels[corev1.LabelInstanceTypeStable] != insts[0].Type ||
		got.Labels[karpv1.CapacityTypeLabelKey] != karpv1.CapacityTypeOnDemand || got.Labels[karpv1.ZoneLabelKey] != insts[0].Zone {
		t.Errorf("claim %+v labels %v; instance %+v", got.Status, got.Labels, insts[0])
	}
	if !cloudprovider.Fits(claim.Spec.Resources.Requests, got.Status.Allocatable) {
		t.Errorf("allocatable %v does not hold the requests", got.Status.Allocatable)
	}
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	reqs := got.Labels
	cheapest := ""
	best := 0.0
	for _, it := range its {
		l := it.Requirements.Labels()
		gen, _ := strconv.Atoi(l[awsv1.LabelInstanceGeneration])
		if !slices.Contains([]string{"c", "m", "r"}, l[awsv1.LabelInstanceCategory]) || gen <= 5 || l[corev1.LabelArchStable] != "amd64" ||
			!cloudprovider.Fits(claim.Spec.Resources.Requests, it.Allocatable()) {
			continue
		}
		for _, o := range it.Offerings {
			if o.CapacityType == karpv1.CapacityTypeOnDemand && (cheapest == "" || o.Price < best) {
				cheapest, best = it.Name, o.Price
			}
		}
	}
	if reqs[corev1.LabelInstanceTypeStable] != cheapest {
		t.Errorf("launched %s, the cheapest fitting type is %s", reqs[corev1.LabelInstanceTypeStable], cheapest)
	}
}

func TestInsufficientCapacityFallsToTheNextAndIsRemembered(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3")}
	first, err := f.Provider.Create(ctx, claimFor(nc, np, "probe", requests))
	if err != nil {
		t.Fatal(err)
	}
	cheapest := first.Labels[corev1.LabelInstanceTypeStable]
	f.AWS.SetInsufficientCapacity(cheapest, "", "on-demand", true)
	got, err := f.Provider.Create(ctx, claimFor(nc, np, "after-ice", requests))
	if err != nil {
		t.Fatal(err)
	}
	if got.Labels[corev1.LabelInstanceTypeStable] == cheapest {
		t.Fatalf("launched %s despite its insufficient capacity", cheapest)
	}
	isOut := func() bool {
		its, err := f.Provider.InstanceTypes(ctx, nc)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range its {
			if it.Name != cheapest {
				continue
			}
			for _, o := range it.Offerings {
				if o.CapacityType == karpv1.CapacityTypeOnDemand && o.Zone == first.Labels[karpv1.ZoneLabelKey] {
					return !o.Available
				}
			}
		}
		t.Fatalf("%s not offered", cheapest)
		return false
	}
	if !isOut() {
		t.Fatal("the failed offering is still available")
	}
	// The next launch skips it without asking EC2 for it.
	if _, err := f.Provider.Create(ctx, claimFor(nc, np, "skips", requests)); err != nil {
		t.Fatal(err)
	}
	last := f.AWS.Requests("CreateFleet")
	for k, v := range last[len(last)-1].Form {
		if strings.HasSuffix(k, ".InstanceType") && v[0] == cheapest {
			t.Fatalf("the fleet still lists %s (%s)", cheapest, k)
		}
	}
	f.Clock.Step(unavailable.DefaultTTL)
	if isOut() {
		t.Error("the offering is still unavailable after its entry expired")
	}
	// With every candidate short, the launch fails with insufficient capacity naming offerings.
	for _, z := range f.AWS.Zones() {
		for k, v := range last[len(last)-1].Form {
			if strings.HasSuffix(k, ".InstanceType") {
				f.AWS.SetInsufficientCapacity(v[0], z.Name, "on-demand", true)
			}
		}
	}
	f.AWS.SetInsufficientCapacity(cheapest, "", "on-demand", true)
	tiny := claimFor(nc, np, "none-left", requests)
	tiny.Spec.Requirements = append(tiny.Spec.Requirements, karpv1.NodeSelectorRequirementWithMinValues{Key: corev1.LabelInstanceTypeStable,
		Operator: karpv1.NodeSelectorOpIn, Values: []string{cheapest}})
	_, err = f.Provider.Create(ctx, tiny)
	var ice *cloudprovider.InsufficientCapacityError
	if !cloudprovider.IsInsufficientCapacity(err) {
		t.Fatalf("got %v, want an insufficient capacity error", err)
	}
	_ = ice
}

func TestRetriedOrRestartedLaunchBuysOneInstance(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	claim := claimFor(nc, np, "once", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	// The fleet is created but its answer is lost (a timeout): the call fails.
	f.AWS.InjectFault("CreateFleet", 1, awsfake.Fault{Code: "InternalError", Message: "lost answer", After: true})
	if _, err := f.Provider.Create(ctx, claim); err == nil {
		t.Fatal("the lost answer must fail the call")
	}
	// The SDK's own retries reuse the client token; Capstan's retry, and a restarted Capstan,
	// find the instance by its tag.
	again, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	restarted := f.NewProvider(t, f.Clients)
	third, err := restarted.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	insts := f.AWS.LiveInstances(aws.NodeClaimTag, "once")
	if len(insts) != 1 {
		t.Fatalf("%d instances for one NodeClaim", len(insts))
	}
	if again.Status.ProviderID != insts[0].ProviderID() || third.Status.ProviderID != insts[0].ProviderID() {
		t.Errorf("provider IDs %s, %s; instance %s", again.Status.ProviderID, third.Status.ProviderID, insts[0].ProviderID())
	}
	if third.Status.Allocatable.Cpu().IsZero() {
		t.Errorf("the found instance's claim has no allocatable: %+v", third.Status)
	}
}

func TestGetListDelete(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	claim := claimFor(nc, np, "gld", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	launched, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	got, err := f.Provider.Get(ctx, launched.Status.ProviderID)
	if err != nil || got.Name != "gld" || got.Labels[karpv1.NodePoolLabelKey] != "orders" {
		t.Fatalf("Get: %+v, %v", got, err)
	}
	list, err := f.Provider.List(ctx)
	if err != nil || len(list) != 1 || list[0].Status.ProviderID != launched.Status.ProviderID {
		t.Fatalf("List: %v, %v", list, err)
	}
	claim.Status.ProviderID = launched.Status.ProviderID
	if err := f.Provider.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	// Shutting down: Delete again is fine, Get still finds it (its kubelet may still run).
	if err := f.Provider.Delete(ctx, claim); err != nil {
		t.Fatalf("second Delete while terminating: %v", err)
	}
	if _, err := f.Provider.Get(ctx, launched.Status.ProviderID); err != nil {
		t.Fatalf("Get while shutting down: %v", err)
	}
	f.Clock.Step(5 * time.Second)
	f.AWS.Advance(time.Second)
	if _, err := f.Provider.Get(ctx, launched.Status.ProviderID); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Fatalf("Get after termination: %v", err)
	}
	if err := f.Provider.Delete(ctx, claim); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Fatalf("Delete of a terminated instance: %v", err)
	}
	if list, err := f.Provider.List(ctx); err != nil || len(list) != 0 {
		t.Fatalf("List after termination: %v, %v", list, err)
	}
	if _, err := f.Provider.Get(ctx, "aws:///us-east-1a/i-0doesnotexist0000"); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Fatalf("Get of an unknown instance: %v", err)
	}
	if _, err := f.Provider.Get(ctx, "Provider:///AZ/i-01234567890123456"); !cloudprovider.IsNodeClaimNotFound(err) {
		t.Errorf("Get of another cloud's provider ID: %v, want not found", err)
	}
	// A claim whose launch was never recorded is deleted through its tag.
	unrecorded := claimFor(nc, np, "unrecorded", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	if _, err := f.Provider.Create(ctx, unrecorded); err != nil {
		t.Fatal(err)
	}
	if err := f.Provider.Delete(ctx, unrecorded); err != nil {
		t.Fatal(err)
	}
	if n := len(f.AWS.LiveInstances(aws.NodeClaimTag, "unrecorded")); n != 0 {
		t.Fatalf("%d instances left", n)
	}
}

func TestNodeRegistersWithTheClaimsAllocatable(t *testing.T) {
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc.Spec.Kubelet = &awsv1.KubeletConfiguration{MaxPods: ptr(int32(40)), SystemReserved: awsv1.ReservedResources{"cpu": "100m", "memory": "200Mi"}}
	nc = resolved(t, f, nc)
	for i, requests := range []corev1.ResourceList{
		{corev1.ResourceCPU: resource.MustParse("1")},
		{corev1.ResourceCPU: resource.MustParse("7"), corev1.ResourceMemory: resource.MustParse("50Gi")},
	} {
		claim := claimFor(nc, np, fmt.Sprintf("kubelet-%d", i), requests)
		got, inst, node := launchAndBoot(t, f, claim)
		if node.Spec.ProviderID != got.Status.ProviderID || node.Labels["workload"] != "orders" || node.Labels[karpv1.NodePoolLabelKey] != "orders" {
			t.Errorf("node %s: providerID %s labels %v", node.Name, node.Spec.ProviderID, node.Labels)
		}
		for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
			a, b := node.Status.Allocatable[name], got.Status.Allocatable[name]
			if a.Cmp(b) != 0 {
				t.Errorf("%s: Node allocatable %s %s, NodeClaim's %s", inst.Type, name, a.String(), b.String())
			}
		}
		if got.Status.Capacity.Pods().Value() != 40 {
			t.Errorf("pods capacity %v, want maxPods 40", got.Status.Capacity.Pods())
		}
	}
}

func ptr[T any](v T) *T { return &v }

// launchAndBoot launches the claim and lets the fake kubelet boot its instance; it returns the
// launched claim, the instance and the Node it registered (deleted when the test ends).
func launchAndBoot(t *testing.T, f *awstest.Fixture, claim *karpv1.NodeClaim) (*karpv1.NodeClaim, awsfake.Instance, *corev1.Node) {
	t.Helper()
	ctx := context.Background()
	got, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	k := &awsfake.Kubelet{Server: f.AWS, Client: env.Client, BootDelay: time.Nanosecond}
	f.Clock.Step(time.Second)
	if err := k.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	inst := f.AWS.LiveInstances(aws.NodeClaimTag, claim.Name)[0]
	node := &corev1.Node{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: inst.PrivateDNS}, node); err != nil {
		t.Fatalf("no Node registered: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, node) })
	return got, inst, node
}

func TestLabelsAndAllocatableMatchTheCatalog(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, _ := f.Orders(t)
	nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}
	nc.Spec.AMIFamily = nil
	nc = resolved(t, f, nc)
	// Standard and NVIDIA images for each architecture, Neuron for x86_64.
	if len(nc.Status.AMIs) != 5 {
		t.Fatalf("al2023@latest resolved to %+v, want five images", nc.Status.AMIs)
	}
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]catalog.Entry{}
	for _, e := range entries {
		byName[e.Name] = e
	}
	if len(its) < 700 {
		t.Fatalf("%d instance types", len(its))
	}
	for _, it := range its {
		e := byName[it.Name]
		labels := it.Requirements.Labels()
		for k, v := range e.Labels {
			if labels[k] != v {
				t.Errorf("%s: label %s=%q, catalog %q", it.Name, k, labels[k], v)
			}
		}
		alloc := it.Allocatable()
		for _, name := range []string{"cpu", "pods", "ephemeral-storage"} {
			want := resource.MustParse(e.Allocatable[name])
			if got := alloc[corev1.ResourceName(name)]; got.Cmp(want) != 0 {
				t.Errorf("%s: allocatable %s %s, catalog %s", it.Name, name, got.String(), want.String())
			}
		}
		for name, v := range e.Allocatable {
			if name == "cpu" || name == "memory" || name == "pods" || name == "ephemeral-storage" || name == "vpc.amazonaws.com/pod-eni" {
				continue
			}
			if got := alloc[corev1.ResourceName(name)]; got.Cmp(resource.MustParse(v)) != 0 {
				t.Errorf("%s: allocatable %s %s, catalog %s", it.Name, name, got.String(), v)
			}
		}
		// Graviton types too: their kernels keep 64 MiB for CMA before the hypervisor's share.
		want := resource.MustParse(e.Allocatable["memory"])
		if got := alloc[corev1.ResourceMemory]; got.Cmp(want) != 0 {
			t.Errorf("%s: allocatable memory %s, catalog %s", it.Name, got.String(), want.String())
		}
		od := false
		for _, o := range it.Offerings {
			od = od || o.CapacityType == karpv1.CapacityTypeOnDemand && o.Price == e.OnDemandPriceUSD[catalog.Region]
		}
		if !od {
			t.Errorf("%s: no on-demand offering at the catalog's price %v: %+v", it.Name, e.OnDemandPriceUSD[catalog.Region], it.Offerings)
		}
		// The local EC2 endpoint reports Nitro's 28 shared attachments: less the root volume and
		// the primary network interface, 26 EBS volumes for pods; no limit for the others.
		limit, limited := it.VolumeLimits[aws.EBSCSIDriver]
		if nitro := e.Labels[awsv1.LabelInstanceHypervisor] == "nitro"; limited != nitro || nitro && limit != 26 {
			t.Errorf("%s (hypervisor %q): EBS volume limit %d (set %v), want 26 on Nitro, none otherwise", it.Name, e.Labels[awsv1.LabelInstanceHypervisor], limit, limited)
		}
	}
}

// catalogOnDemand is the embedded catalog's on-demand price of each type.
func catalogOnDemand(t *testing.T) map[string]float64 {
	t.Helper()
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	price := map[string]float64{}
	for _, e := range entries {
		price[e.Name] = e.OnDemandPriceUSD[catalog.Region]
	}
	return price
}

func TestPricesFallBackWhenPricingIsUnreachable(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, _ := f.Orders(t)
	nc = resolved(t, f, nc)
	// The Pricing API fails (an isolated VPC); so does the spot price history, once.
	f.AWS.InjectFault("GetProducts", 100, awsfake.Fault{Code: "AccessDeniedException", Message: "no pricing here", Status: 403})
	f.AWS.InjectFault("DescribeSpotPriceHistory", 1, awsfake.Fault{Code: "UnauthorizedOperation", Message: "not allowed", Status: 403})
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	price := catalogOnDemand(t)
	if len(its) < 100 {
		t.Fatalf("%d types without the Pricing API", len(its))
	}
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.Price != price[it.Name] {
				t.Fatalf("%s %s: %v, want the catalog's on-demand price %v (spot too, before any spot price was read)", it.Name, o.CapacityType, o.Price, price[it.Name])
			}
		}
	}
	// The next refresh reads spot prices again; on-demand stays on the fallback.
	f.Clock.Step(11 * time.Minute)
	its, err = f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	cheaper := 0
	for _, it := range its {
		for _, o := range it.Offerings {
			if o.CapacityType == karpv1.CapacityTypeSpot && o.Price < price[it.Name] {
				cheaper++
			}
		}
	}
	if cheaper == 0 {
		t.Error("spot prices were not read again")
	}
}

func TestUserDataPutsCapstansNodeConfigFirst(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	script := "#!/bin/bash\necho class-script\n"
	nc.Spec.UserData = ptr("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"BOUNDARY\"\n\n--BOUNDARY\n" +
		"Content-Type: text/x-shellscript; charset=\"us-ascii\"\n\n" + script + "--BOUNDARY\n" +
		"Content-Type: application/node.eks.aws\n\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  kubelet:\n    config:\n      shutdownGracePeriod: 30s\n--BOUNDARY--\n")
	nc.Spec.Kubelet = &awsv1.KubeletConfiguration{MaxPods: ptr(int32(30))}
	nc = resolved(t, f, nc)
	if _, err := f.Provider.Create(ctx, claimFor(nc, np, "userdata", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})); err != nil {
		t.Fatal(err)
	}
	for _, lt := range f.AWS.LaunchTemplates() {
		raw, err := base64.StdEncoding.DecodeString(lt.Data["UserData"])
		if err != nil {
			t.Fatal(err)
		}
		ud := string(raw)
		// As Karpenter writes it: nodeadm merges in order, so the class's parts may change
		// what Capstan's NodeConfig says.
		iScript, iClass, iCapstan := strings.Index(ud, "echo class-script"), strings.Index(ud, "shutdownGracePeriod"), strings.Index(ud, "apiServerEndpoint: https://kube.example:6443")
		if iScript < 0 || iClass < 0 || iCapstan < 0 || !(iCapstan < iScript && iScript < iClass) {
			t.Fatalf("want Capstan's NodeConfig, then the class's script, then its NodeConfig:\n%s", ud)
		}
		config, _, err := awsfake.ParseUserData(lt.Data["UserData"])
		if err != nil {
			t.Fatal(err)
		}
		if config["shutdownGracePeriod"] != "30s" || config["maxPods"] != float64(30) {
			t.Errorf("merged kubelet config %v: want the class's shutdownGracePeriod and its kubelet.maxPods", config)
		}
	}
	bad := &awsv1.EC2NodeClass{}
	*bad = *nc
	bad.Spec.UserData = ptr("MIME-Version: 1.0\nContent-Type: multipart/mixed\n\nno boundary")
	if _, err := f.Provider.UserData(bad, claimFor(nc, np, "x", nil)); err == nil || !strings.Contains(err.Error(), "spec.userData") {
		t.Errorf("a MIME document without a boundary: %v, want an error naming spec.userData", err)
	}
}

// A claim whose taint value would break out of the AL2 script's quotes (one stored before the
// CRDs refused it) gets an InvalidNodeClaimError naming the field: no launch template, no
// instance, and UserData builds nothing from it.
func TestInvalidClaimLaunchesNothing(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	f.KubeVersion = "1.32" // the last with AL2 images
	nc, np := f.Orders(t)
	nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2@latest"}}
	nc.Spec.AMIFamily = nil
	nc = resolved(t, f, nc)
	claim := claimFor(nc, np, "invalid", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	claim.Spec.Taints = karpv1.Taints{{Key: "workload", Value: "x';touch /tmp/p;'", Effect: corev1.TaintEffectNoSchedule}}
	_, err := f.Provider.Create(ctx, claim)
	if !cloudprovider.IsInvalidNodeClaim(err) || !strings.Contains(err.Error(), "spec.taints[0].value") {
		t.Fatalf("Create: %v; want an InvalidNodeClaimError naming spec.taints[0].value", err)
	}
	if n, m := len(f.AWS.LaunchTemplates()), len(f.AWS.Instances()); n != 0 || m != 0 {
		t.Fatalf("%d launch template(s) and %d instance(s) for an invalid claim", n, m)
	}
	if ud, err := f.Provider.UserData(nc, claim); !cloudprovider.IsInvalidNodeClaim(err) {
		t.Fatalf("UserData: %v (%q); want an InvalidNodeClaimError", err, ud)
	}
}

func TestUnusedLaunchTemplatesAreCollected(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	requests := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
	if _, err := f.Provider.Create(ctx, claimFor(nc, np, "lt-a", requests)); err != nil {
		t.Fatal(err)
	}
	if len(f.AWS.LaunchTemplates()) != 1 {
		t.Fatalf("%d templates", len(f.AWS.LaunchTemplates()))
	}
	// Used recently: kept.
	f.Clock.Step(aws.TemplateTTL / 2)
	if err := f.Provider.GarbageCollectTemplates(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if len(f.AWS.LaunchTemplates()) != 1 {
		t.Fatal("a template used half a TTL ago was deleted")
	}
	// Unused for a TTL: deleted; the next launch makes it again.
	f.Clock.Step(aws.TemplateTTL)
	if err := f.Provider.GarbageCollectTemplates(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if len(f.AWS.LaunchTemplates()) != 0 {
		t.Fatal("an unused template was kept")
	}
	if _, err := f.Provider.Create(ctx, claimFor(nc, np, "lt-b", requests)); err != nil {
		t.Fatal(err)
	}
	if len(f.AWS.LaunchTemplates()) != 1 {
		t.Fatal("the next launch did not make its template again")
	}
	// A restarted Capstan, which never used it, counts from its creation.
	f.Clock.Step(aws.TemplateTTL / 2)
	if err := f.NewProvider(t, f.Clients).GarbageCollectTemplates(ctx, nc); err != nil {
		t.Fatal(err)
	}
	if len(f.AWS.LaunchTemplates()) != 1 {
		t.Fatal("a template created half a TTL ago was deleted after a restart")
	}
}

// A NodeOverlay discount on on-demand m6i makes m6i.xlarge the cheapest fitting type by the
// overlays' prices: the fleet is asked for "prioritized" on-demand allocation with the overrides
// in that order, so EC2 launches what Capstan priced rather than what EC2 prices lowest.
func TestOverlaidPricesPrioritiseTheOnDemandFleet(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc = resolved(t, f, nc)
	its, err := f.Provider.InstanceTypes(ctx, nc)
	if err != nil {
		t.Fatal(err)
	}
	discount := v1alpha1.NodeOverlay{ObjectMeta: metav1.ObjectMeta{Name: "savings-plan"}, Spec: v1alpha1.NodeOverlaySpec{
		Requirements: []v1alpha1.NodeSelectorRequirement{
			{Key: awsv1.LabelInstanceFamily, Operator: corev1.NodeSelectorOpIn, Values: []string{"m6i"}},
			{Key: karpv1.CapacityTypeLabelKey, Operator: corev1.NodeSelectorOpIn, Values: []string{karpv1.CapacityTypeOnDemand}}},
		PriceAdjustment: ptr("-60%")}}
	table, verdicts := overlay.Evaluate([]v1alpha1.NodeOverlay{discount}, []overlay.Pool{{Name: np.Name, Types: its}})
	if len(verdicts) != 0 {
		t.Fatal(verdicts)
	}
	store := &overlay.Store{}
	store.Set(table)
	f.Provider.SetOverlays(store.ForLaunches())
	claim := claimFor(nc, np, "orders-overlaid", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("3"), corev1.ResourceMemory: resource.MustParse("6Gi")})
	got, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	if typ := got.Labels[corev1.LabelInstanceTypeStable]; typ != "m6i.xlarge" {
		t.Errorf("launched %s, want m6i.xlarge (the cheapest fitting type at the overlay's prices)", typ)
	}
	fleets := f.AWS.Requests("CreateFleet")
	form := fleets[len(fleets)-1].Form
	if s := form.Get("OnDemandOptions.AllocationStrategy"); s != "prioritized" {
		t.Errorf("allocation strategy %q, want prioritized", s)
	}
	for k, v := range form {
		if strings.HasSuffix(k, ".InstanceType") && v[0] == "m6i.xlarge" {
			if p := form.Get(strings.TrimSuffix(k, "InstanceType") + "Priority"); p != "0" {
				t.Errorf("m6i.xlarge's priority %q, want 0 (first)", p)
			}
		}
	}
}
