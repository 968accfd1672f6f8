package tagging

import (
	"context"
	"strings"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/internal/testenv"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// launched resolves the runbook's orders class (with classTags added) under a name unique to
// the test and suffix, stores a claim of it, launches its instance and, when registered, records the
// claim as registered to a node. It returns the stored claim.
func launched(t *testing.T, f *awstest.Fixture, suffix string, classTags map[string]string, registered bool) *karpv1.NodeClaim {
	t.Helper()
	ctx := context.Background()
	nc, np := f.Orders(t)
	nc.Name = strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-")) + suffix
	for k, v := range classTags {
		nc.Spec.Tags[k] = v
	}
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
	if _, err := (&ec2nodeclass.Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}).
		Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	claim := &karpv1.NodeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: nc.Name, Labels: map[string]string{karpv1.NodePoolLabelKey: np.Name}},
		Spec: karpv1.NodeClaimSpec{
			NodeClassRef: &karpv1.NodeClassReference{Group: awsv1.Group, Kind: "EC2NodeClass", Name: nc.Name},
			Requirements: np.Spec.Template.Spec.Requirements,
			Resources:    karpv1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}},
		},
	}
	if err := env.Client.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), claim) })
	got, err := f.Provider.Create(ctx, claim)
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.ProviderID = got.Status.ProviderID
	if registered {
		claim.Status.NodeName = "ip-10-0-1-7.ec2.internal"
		meta.SetStatusCondition(&claim.Status.Conditions, metav1.Condition{Type: karpv1.ConditionTypeRegistered,
			Status: metav1.ConditionTrue, Reason: "Registered", LastTransitionTime: metav1.NewTime(time.Now())})
	}
	if err := env.Client.Status().Update(ctx, claim); err != nil {
		t.Fatal(err)
	}
	return claim
}

// reconciled runs one reconcile of the claim and reads it back.
func reconciled(t *testing.T, c *Controller, claim *karpv1.NodeClaim) (*karpv1.NodeClaim, error) {
	t.Helper()
	_, err := c.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(claim)})
	got := &karpv1.NodeClaim{}
	if gerr := env.Client.Get(context.Background(), client.ObjectKeyFromObject(claim), got); gerr != nil {
		t.Fatal(gerr)
	}
	return got, err
}

// tags reads the claim's instance's tags through the SDK.
func tags(t *testing.T, f *awstest.Fixture, claim *karpv1.NodeClaim) map[string]string {
	t.Helper()
	id := claim.Status.ProviderID[strings.LastIndex(claim.Status.ProviderID, "/")+1:]
	out, err := f.Clients.EC2.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			for _, tag := range i.Tags {
				m[awssdk.ToString(tag.Key)] = awssdk.ToString(tag.Value)
			}
		}
	}
	return m
}

func TestARegisteredInstanceIsNamedAfterItsNode(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Tagger: f.Provider}
	claim := launched(t, f, "", nil, true)
	if _, ok := tags(t, f, claim)[aws.TagName]; ok {
		t.Fatal("the instance has a Name before its node registered")
	}
	got, err := reconciled(t, c, claim)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{aws.TagName: claim.Status.NodeName, aws.NodeClaimTag: claim.Name,
		aws.TagEKSClusterName: awstest.Cluster, "Team": "commerce"}
	have := tags(t, f, claim)
	for k, v := range want {
		if have[k] != v {
			t.Errorf("tag %s=%q, want %q", k, have[k], v)
		}
	}
	if got.Annotations[AnnotationTagged] != "true" {
		t.Errorf("annotations %v: want %s=true", got.Annotations, AnnotationTagged)
	}
	// Done once: a tagged claim calls nothing.
	before := f.AWS.Calls("CreateTags") + f.AWS.Calls("DescribeInstances")
	if _, err := reconciled(t, c, got); err != nil {
		t.Fatal(err)
	}
	if after := f.AWS.Calls("CreateTags") + f.AWS.Calls("DescribeInstances"); after != before {
		t.Errorf("a tagged claim made %d more EC2 calls", after-before)
	}
}

func TestAnUnregisteredClaimIsNotTagged(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Tagger: f.Provider}
	claim := launched(t, f, "", nil, false)
	got, err := reconciled(t, c, claim)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tags(t, f, claim)[aws.TagName]; ok || got.Annotations[AnnotationTagged] != "" {
		t.Errorf("an unregistered claim's instance was named (tags %v, annotations %v)", tags(t, f, claim), got.Annotations)
	}
	if n := f.AWS.Calls("CreateTags"); n != 0 {
		t.Errorf("%d CreateTags calls", n)
	}
}

func TestTheClassesOwnNameTagWins(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Tagger: f.Provider}
	claim := launched(t, f, "", map[string]string{aws.TagName: "orders-fleet"}, true)
	got, err := reconciled(t, c, claim)
	if err != nil {
		t.Fatal(err)
	}
	if name := tags(t, f, claim)[aws.TagName]; name != "orders-fleet" {
		t.Errorf("Name=%q, want the class's orders-fleet", name)
	}
	if got.Annotations[AnnotationTagged] != "true" {
		t.Errorf("annotations %v", got.Annotations)
	}
}

func TestAFailedTaggingIsRetriedAndAGoneInstanceIsLeft(t *testing.T) {
	f := awstest.New(t, env.Client)
	c := &Controller{Client: env.Client, Tagger: f.Provider}
	claim := launched(t, f, "", nil, true)
	f.AWS.InjectFault("CreateTags", 1, awsfake.Fault{Code: "UnauthorizedOperation", Message: "not authorized to perform ec2:CreateTags"})
	got, err := reconciled(t, c, claim)
	if err == nil || !strings.Contains(err.Error(), "UnauthorizedOperation") {
		t.Fatalf("error %v: want the refusal", err)
	}
	if got.Annotations[AnnotationTagged] != "" {
		t.Fatalf("marked tagged after a refusal: %v", got.Annotations)
	}
	if got, err = reconciled(t, c, got); err != nil || got.Annotations[AnnotationTagged] != "true" ||
		tags(t, f, claim)[aws.TagName] != claim.Status.NodeName {
		t.Fatalf("the retry: error %v, annotations %v, tags %v", err, got.Annotations, tags(t, f, claim))
	}

	gone := launched(t, f, "-gone", nil, true)
	id := gone.Status.ProviderID[strings.LastIndex(gone.Status.ProviderID, "/")+1:]
	if !f.AWS.Terminate(id) {
		t.Fatalf("no instance %s", id)
	}
	f.AWS.Advance(0)
	f.Clock.Step(time.Minute)
	f.AWS.Advance(0)
	got, err = reconciled(t, c, gone)
	if err != nil || got.Annotations[AnnotationTagged] != "" {
		t.Errorf("a terminated instance: error %v, annotations %v (want neither: garbage collection's)", err, got.Annotations)
	}
}
