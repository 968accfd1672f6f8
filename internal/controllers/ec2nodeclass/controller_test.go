package ec2nodeclass

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// create stores a class under a name unique to the test and deletes it (finalizer removed)
// afterwards.
func create(t *testing.T, nc *awsv1.EC2NodeClass) *awsv1.EC2NodeClass {
	t.Helper()
	nc.Name = strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	if len(nc.Name) > 60 {
		nc.Name = nc.Name[:60]
	}
	if err := env.Client.Create(context.Background(), nc); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		got := &awsv1.EC2NodeClass{}
		if env.Client.Get(ctx, client.ObjectKeyFromObject(nc), got) == nil {
			got.Finalizers = nil
			_ = env.Client.Update(ctx, got)
			_ = env.Client.Delete(ctx, got)
		}
	})
	return nc
}

func reconcileClass(t *testing.T, c *Controller, nc *awsv1.EC2NodeClass) (*awsv1.EC2NodeClass, error) {
	t.Helper()
	_, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)})
	got := &awsv1.EC2NodeClass{}
	if gerr := env.Client.Get(context.Background(), client.ObjectKeyFromObject(nc), got); gerr != nil {
		t.Fatal(gerr)
	}
	return got, err
}

func TestOrdersClassResolves(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	nc, _ := f.Orders(t)
	nc = create(t, nc)
	got, err := reconcileClass(t, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, awsv1.ConditionTypeReady)
	if ready == nil || ready.Status != metav1.ConditionTrue {
		t.Fatalf("Ready: %+v", ready)
	}
	var zones []string
	for _, s := range got.Status.Subnets {
		if !strings.HasPrefix(s.ID, "subnet-0") || s.ZoneID == "" {
			t.Errorf("subnet %+v", s)
		}
		zones = append(zones, s.Zone)
	}
	slices.Sort(zones)
	// The tagged subnet of each zone, not the untagged public one.
	if want := []string{"us-east-1a", "us-east-1b", "us-east-1c"}; !slices.Equal(zones, want) {
		t.Errorf("subnet zones %v, want %v", zones, want)
	}
	if len(got.Status.SecurityGroups) != 1 || got.Status.SecurityGroups[0].ID != "sg-0nodes00000000001" || got.Status.SecurityGroups[0].Name == "" {
		t.Errorf("security groups %+v", got.Status.SecurityGroups)
	}
	pinned := nc.Spec.AMISelectorTerms[0].ID
	if len(got.Status.AMIs) != 1 || got.Status.AMIs[0].ID != pinned || got.Status.AMIs[0].Requirements[0].Values[0] != "amd64" {
		t.Errorf("AMIs %+v, want only %s (amd64)", got.Status.AMIs, pinned)
	}
	profile := aws.InstanceProfileName(awstest.Cluster, "us-east-1", nc.Name)
	if got.Status.InstanceProfile != profile {
		t.Errorf("instance profile %q, want %q", got.Status.InstanceProfile, profile)
	}
	if p, ok := f.AWS.InstanceProfiles()[profile]; !ok || !slices.Equal(p.Roles, []string{"KarpenterNodeRole-" + awstest.Cluster}) {
		t.Errorf("instance profile in IAM: %+v (found %v)", p, ok)
	}
	// The tags Karpenter's own IAM policy requires on CreateInstanceProfile.
	for k, v := range map[string]string{"kubernetes.io/cluster/" + awstest.Cluster: "owned", "eks:eks-cluster-name": awstest.Cluster,
		"topology.kubernetes.io/region": "us-east-1", "karpenter.k8s.aws/ec2nodeclass": nc.Name} {
		if got := f.AWS.InstanceProfiles()[profile].Tags[k]; got != v {
			t.Errorf("instance profile tag %s=%q, want %q", k, got, v)
		}
	}
	if !slices.Contains(got.Finalizers, Finalizer) {
		t.Errorf("finalizers %v", got.Finalizers)
	}
	// A second pass changes nothing and creates no second profile.
	again, err := reconcileClass(t, c, nc)
	if err != nil || again.ResourceVersion != got.ResourceVersion {
		t.Errorf("second pass: err %v, resourceVersion %s → %s", err, got.ResourceVersion, again.ResourceVersion)
	}
	if n := f.AWS.Calls("CreateInstanceProfile"); n != 1 {
		t.Errorf("CreateInstanceProfile called %d times", n)
	}
}

func TestSelectorMatchingNothingIsNamed(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	nc, np := f.Orders(t)
	nc.Spec.SubnetSelectorTerms[0].Tags = awsv1.SelectorTags{"karpenter.sh/discovery": "prod-east"}
	nc = create(t, nc)
	got, err := reconcileClass(t, c, nc)
	if err != nil {
		t.Fatalf("a selector matching nothing is not a failed call: %v", err)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, awsv1.ConditionTypeReady)
	const want = "no subnet matches tags karpenter.sh/discovery=prod-east"
	if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, want) || ready.Reason != "SubnetsNotFound" {
		t.Fatalf("Ready: %+v, want False naming %q", ready, want)
	}
	if sc := meta.FindStatusCondition(got.Status.Conditions, awsv1.ConditionTypeSecurityGroupsReady); sc == nil || sc.Status != metav1.ConditionTrue {
		t.Errorf("SecurityGroupsReady: %+v", sc)
	}
	// Its NodePool's pods are not provisioned, and the reason says why.
	np.Spec.Template.Spec.NodeClassRef.Name = nc.Name
	_, err = f.Provider.GetInstanceTypes(context.Background(), np)
	if !cloudprovider.IsNodeClassNotReady(err) || !strings.Contains(err.Error(), want) {
		t.Fatalf("GetInstanceTypes: %v", err)
	}
	// Tagging a subnet later resolves the class on the next pass.
	f.AWS.AddSubnet(awsfake.Subnet{ID: "subnet-0prodeast0000001", Zone: "us-east-1b", ZoneID: "use1-az2", AvailableIPs: 100,
		Tags: map[string]string{"karpenter.sh/discovery": "prod-east"}})
	got, err = reconcileClass(t, c, nc)
	if err != nil || !meta.IsStatusConditionTrue(got.Status.Conditions, awsv1.ConditionTypeReady) || len(got.Status.Subnets) != 1 {
		t.Fatalf("after tagging: err %v, status %+v", err, got.Status)
	}
}

func TestFailedCallsAreNamedAndRetried(t *testing.T) {
	f := awstest.New(t, env.Client)
	nc, _ := f.Orders(t)
	nc = create(t, nc)
	for _, tc := range []struct {
		name    string
		setup   func() *aws.Provider
		message string
	}{
		{"wrong region", func() *aws.Provider {
			return f.NewProvider(t, f.NewClients(t, aws.ClientOptions{Region: "eu-west-3"}))
		}, "Credential should be scoped to a valid region, not 'eu-west-3'"},
		{"expired credentials", func() *aws.Provider {
			f.AWS.ExpireCredentials(awstest.AccessKey, true)
			return f.Provider
		}, "ExpiredToken"},
		{"unreachable endpoint", func() *aws.Provider {
			return f.NewProvider(t, f.NewClients(t, aws.ClientOptions{EndpointURL: "http://127.0.0.1:1", MaxAttempts: 1}))
		}, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer f.AWS.ExpireCredentials(awstest.AccessKey, false)
			c := &Controller{Client: env.Client, Provider: tc.setup(), Clock: f.Clock}
			got, err := reconcileClass(t, c, nc)
			if err == nil {
				t.Fatal("a failed call must be returned for a retry with backoff")
			}
			ready := meta.FindStatusCondition(got.Status.Conditions, awsv1.ConditionTypeReady)
			if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, tc.message) {
				t.Fatalf("Ready: %+v, want False with %q", ready, tc.message)
			}
			if !strings.Contains(ready.Message, "describing subnets (tags karpenter.sh/discovery="+awstest.Cluster+")") {
				t.Errorf("the message does not say which lookup failed: %s", ready.Message)
			}
		})
	}
	// Throttling is retried by the SDK's adaptive retryer within one pass.
	f.AWS.InjectFault("DescribeSubnets", 2, awsfake.Fault{Code: "RequestLimitExceeded", Message: "Request limit exceeded."})
	c := &Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	got, err := reconcileClass(t, c, nc)
	if err != nil || !meta.IsStatusConditionTrue(got.Status.Conditions, awsv1.ConditionTypeReady) {
		t.Fatalf("after throttling: err %v, conditions %+v", err, got.Status.Conditions)
	}
	if n := f.AWS.Calls("DescribeSubnets"); n < 3 {
		t.Errorf("DescribeSubnets called %d times, want the two throttled calls retried", n)
	}
}

func TestClassInUseWaitsForItsClaimsThenCleansUp(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	nc, np := f.Orders(t)
	nc = create(t, nc)
	got, err := reconcileClass(t, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	np.Spec.Template.Spec.NodeClassRef.Name = nc.Name
	claim := &karpv1.NodeClaim{ObjectMeta: metav1.ObjectMeta{Name: "uses-" + nc.Name, Labels: map[string]string{karpv1.NodePoolLabelKey: np.Name}},
		Spec: karpv1.NodeClaimSpec{NodeClassRef: np.Spec.Template.Spec.NodeClassRef, Requirements: np.Spec.Template.Spec.Requirements,
			Resources: karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}}}}
	if _, err := f.Provider.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(ctx, claim) })
	if len(f.AWS.LaunchTemplates()) == 0 {
		t.Fatal("no launch template was made")
	}
	if n := f.Provider.KeptClasses(); n != 1 {
		t.Fatalf("instance types kept for %d classes after a launch, want 1", n)
	}
	if err := env.Client.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	got, err = reconcileClass(t, c, nc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Finalizers, Finalizer) || len(f.AWS.LaunchTemplates()) == 0 || len(f.AWS.InstanceProfiles()) == 0 {
		t.Fatalf("a class in use let go: finalizers %v, %d templates, %d profiles", got.Finalizers, len(f.AWS.LaunchTemplates()), len(f.AWS.InstanceProfiles()))
	}
	if err := env.Client.Delete(ctx, claim); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nc), &awsv1.EC2NodeClass{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the class is still there: %v", err)
	}
	if n, p := len(f.AWS.LaunchTemplates()), len(f.AWS.InstanceProfiles()); n != 0 || p != 0 {
		t.Errorf("left behind: %d launch templates, %d instance profiles", n, p)
	}
	// Gone: the reconcile that finds it so forgets the instance types built for it.
	if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	if n := f.Provider.KeptClasses(); n != 0 {
		t.Errorf("instance types still kept for %d deleted class(es)", n)
	}
}

func TestUnreadableUserDataIsNamed(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	nc, _ := f.Orders(t)
	ud := "MIME-Version: 1.0\nContent-Type: multipart/mixed\n\nno boundary"
	nc.Spec.UserData = &ud
	nc = create(t, nc)
	got, err := reconcileClass(t, c, nc)
	if err != nil {
		t.Fatalf("bad input is not a failed call: %v", err)
	}
	for _, ct := range []string{awsv1.ConditionTypeValidationSucceeded, awsv1.ConditionTypeReady} {
		cond := meta.FindStatusCondition(got.Status.Conditions, ct)
		if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "spec.userData: a MIME document without a multipart boundary") {
			t.Errorf("%s: %+v", ct, cond)
		}
	}
}

// A resolved class is resolved again after the controller's Resync (the shortest of Karpenter's
// refresh intervals), or after Karpenter's default of one minute.
func TestResolvedClassIsRequeuedAtTheRefreshInterval(t *testing.T) {
	f := awstest.New(t, env.Client)
	nc, _ := f.Orders(t)
	nc = create(t, nc)
	for _, tc := range []struct {
		resync, want time.Duration
	}{{0, time.Minute}, {3 * time.Minute, 3 * time.Minute}} {
		c := &Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock, Resync: tc.resync}
		res, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)})
		if err != nil {
			t.Fatal(err)
		}
		if res.RequeueAfter != tc.want {
			t.Errorf("Resync %v: requeued after %v, want %v", tc.resync, res.RequeueAfter, tc.want)
		}
	}
}
