package aws

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	awssdk "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/catalog"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/test/awsfake"
)

// ec2Client is an SDK client of the local endpoints, with the credentials Capstan uses.
func ec2Client(t testing.TB) *ec2.Client {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(t.Context(), config.WithRegion(s.aws.Region()),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("e2e", "e2e", "")))
	if err != nil {
		t.Fatal(err)
	}
	return ec2.NewFromConfig(cfg, func(o *ec2.Options) { o.BaseEndpoint = awssdk.String(s.aws.URL()) })
}

// pool creates an EC2NodeClass (al2023@latest, the cluster's discovery-tagged subnets and
// security group) and a NodePool labelling its machines pool=<name>.
func pool(t testing.TB, name string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) {
	t.Helper()
	nc, np := poolObjects(name, reqs...)
	for _, o := range []client.Object{nc, np} {
		if err := s.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_ = s.Client.Delete(ctx, np)
		eventuallyGone(t, name)
		_ = s.Client.Delete(ctx, nc)
	})
}

// poolObjects are pool's EC2NodeClass and NodePool, not yet created.
func poolObjects(name string, reqs ...karpv1.NodeSelectorRequirementWithMinValues) (*awsv1.EC2NodeClass, *karpv1.NodePool) {
	nc := &awsv1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: awsv1.EC2NodeClassSpec{
		Role:                       "KarpenterNodeRole-" + cluster,
		AMISelectorTerms:           []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}},
		SubnetSelectorTerms:        []awsv1.SubnetSelectorTerm{{Tags: awsv1.SelectorTags{"karpenter.sh/discovery": cluster}}},
		SecurityGroupSelectorTerms: []awsv1.SecurityGroupSelectorTerm{{Tags: awsv1.SelectorTags{"karpenter.sh/discovery": cluster}}},
	}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{"pool": name}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: awsv1.Group, Kind: "EC2NodeClass", Name: name}
	np.Spec.Template.Spec.Requirements = reqs
	return nc, np
}

// eventuallyGone waits for a pool's claims to go and checks its instances went with them.
func eventuallyGone(t testing.TB, name string) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for len(claims(t, name)) > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
	}
	if n := len(claims(t, name)); n != 0 {
		t.Errorf("pool %s left %d NodeClaims", name, n)
	}
	if n := len(s.aws.LiveInstances(karpv1.NodePoolLabelKey, name)); n != 0 && ctx.Err() == nil {
		t.Errorf("pool %s left %d live instances", name, n)
	}
}

func req(key string, op karpv1.NodeSelectorOperator, values ...string) karpv1.NodeSelectorRequirementWithMinValues {
	return karpv1.NodeSelectorRequirementWithMinValues{Key: key, Operator: op, Values: values}
}

func TestOrdersRunbook(t *testing.T) {
	fleetsBefore := len(s.aws.Requests("CreateFleet"))
	objs := manifests(t, "orders.yaml", nil)
	nc := objs[0].(*awsv1.EC2NodeClass)
	eventually(t, "the orders EC2NodeClass Ready", time.Minute, func(ctx context.Context) (bool, error) {
		got := &awsv1.EC2NodeClass{}
		if err := s.Client.Get(ctx, client.ObjectKeyFromObject(nc), got); err != nil {
			return false, err
		}
		nc = got
		return meta.IsStatusConditionTrue(got.Status.Conditions, awsv1.ConditionTypeReady), nil
	})
	if len(nc.Status.Subnets) != 3 || len(nc.Status.SecurityGroups) != 1 || len(nc.Status.AMIs) != 1 || nc.Status.AMIs[0].ID != nc.Spec.AMISelectorTerms[0].ID {
		t.Errorf("status %+v", nc.Status)
	}
	manifests(t, "orders-worker.yaml", nil)
	eventually(t, "the orders workers Running", 2*time.Minute, running(t, "orders-worker", 3))

	ncs := claims(t, "orders")
	fleets := s.aws.Requests("CreateFleet")[fleetsBefore:]
	if len(ncs) == 0 || len(fleets) != len(ncs) {
		t.Fatalf("%d NodeClaims, %d CreateFleet calls: want one fleet per claim", len(ncs), len(fleets))
	}
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]map[string]string{}
	for _, e := range entries {
		labels[e.Name] = e.Labels
	}
	for _, f := range fleets {
		if f.Form.Get("TargetCapacitySpecification.DefaultTargetCapacityType") != "on-demand" {
			t.Errorf("fleet capacity type %q", f.Form.Get("TargetCapacitySpecification.DefaultTargetCapacityType"))
		}
		for k, v := range f.Form {
			if !strings.HasSuffix(k, ".InstanceType") {
				continue
			}
			l := labels[v[0]]
			gen, _ := strconv.Atoi(l[awsv1.LabelInstanceGeneration])
			if !slices.Contains([]string{"c", "m", "r"}, l[awsv1.LabelInstanceCategory]) || gen <= 5 || l[corev1.LabelArchStable] != "amd64" {
				t.Errorf("override %s=%s is not an amd64 c/m/r type of generation > 5", k, v[0])
			}
		}
	}
	for name, lt := range s.aws.LaunchTemplates() {
		if !strings.HasPrefix(name, "capstan/"+cluster+"/") {
			continue
		}
		if lt.Data["ImageId"] == nc.Status.AMIs[0].ID && (lt.Data["MetadataOptions.HttpTokens"] != "required" || lt.Data["MetadataOptions.HttpPutResponseHopLimit"] != "1") {
			t.Errorf("launch template %s metadata options %v", name, lt.Data)
		}
	}
	for _, claim := range ncs {
		insts := s.aws.LiveInstances(aws.NodeClaimTag, claim.Name)
		if len(insts) != 1 {
			t.Fatalf("NodeClaim %s has %d instances", claim.Name, len(insts))
		}
		for k, v := range map[string]string{"Team": "commerce", "Environment": "staging", "karpenter.sh/nodepool": "orders",
			"kubernetes.io/cluster/" + cluster: "owned", "eks:eks-cluster-name": cluster} {
			if insts[0].Tags[k] != v {
				t.Errorf("instance %s tag %s=%q, want %q", insts[0].ID, k, insts[0].Tags[k], v)
			}
		}
		node := &corev1.Node{}
		if err := s.Client.Get(t.Context(), client.ObjectKey{Name: claim.Status.NodeName}, node); err != nil {
			t.Fatalf("node of %s: %v", claim.Name, err)
		}
		// Named after its node once registered, as Karpenter names it, read through the SDK.
		eventually(t, "instance "+insts[0].ID+" named after its node", time.Minute, func(ctx context.Context) (bool, error) {
			out, err := ec2Client(t).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{insts[0].ID}})
			if err != nil {
				return false, err
			}
			for _, r := range out.Reservations {
				for _, i := range r.Instances {
					for _, tag := range i.Tags {
						if awssdk.ToString(tag.Key) == "Name" {
							return awssdk.ToString(tag.Value) == node.Name, nil
						}
					}
				}
			}
			return false, nil
		})
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
			a, b := node.Status.Allocatable[r], claim.Status.Allocatable[r]
			if a.Cmp(b) != 0 {
				t.Errorf("node %s allocatable %s %s, NodeClaim's %s", node.Name, r, a.String(), b.String())
			}
		}
	}
}

func TestSpotDrill(t *testing.T) {
	pool(t, "spot", req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeSpot),
		req(corev1.LabelArchStable, karpv1.NodeSelectorOpIn, "amd64"), req(awsv1.LabelInstanceCategory, karpv1.NodeSelectorOpIn, "c", "m"))
	workers(t, "spot-workers", 2, map[string]string{"pool": "spot"}, nil)
	eventually(t, "the spot workers Running", 2*time.Minute, running(t, "spot-workers", 2))
	victim := claims(t, "spot")[0]
	insts := s.aws.LiveInstances(aws.NodeClaimTag, victim.Name)
	if len(insts) != 1 || insts[0].Lifecycle != "spot" {
		t.Fatalf("instances of %s: %+v", victim.Name, insts)
	}
	id := insts[0].ID
	if err := s.aws.InterruptSpot(id, queue); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(awsfake.SpotInterruptionWarningNotice)
	// The notice is used: the victim's pods are planned when its claim is deleted, and its drain
	// waits for their machine, so a replacement is launched while they still run on the victim.
	replacedFirst := false
	eventually(t, "the interrupted machine drained and terminated", 2*time.Minute, func(ctx context.Context) (bool, error) {
		live := len(s.aws.LiveInstances(aws.NodeClaimTag, victim.Name)) > 0
		stillOn := slices.ContainsFunc(s.Pods(t, "spot-workers"), func(p corev1.Pod) bool {
			return p.Spec.NodeName == victim.Status.NodeName && p.DeletionTimestamp.IsZero()
		})
		for _, c := range claims(t, "spot") {
			if c.Name != victim.Name && stillOn && meta.IsStatusConditionTrue(c.Status.Conditions, karpv1.ConditionTypeLaunched) {
				replacedFirst = true
			}
		}
		got := &karpv1.NodeClaim{}
		err := s.Client.Get(ctx, client.ObjectKeyFromObject(&victim), got)
		return client.IgnoreNotFound(err) == nil && err != nil && !live, nil
	})
	if !time.Now().Before(deadline) {
		t.Errorf("the instance was gone only after the interruption deadline")
	}
	if !replacedFirst {
		t.Errorf("no replacement was launched while the interrupted machine's pods still ran there")
	}
	eventually(t, "the spot workers Running on a replacement", 2*time.Minute, running(t, "spot-workers", 2))
	if msgs := s.aws.Messages(queue); len(msgs) != 0 {
		t.Errorf("messages left on the queue: %+v", msgs)
	}
	if dlq := s.aws.Messages(queue + "-dlq"); len(dlq) != 0 {
		t.Errorf("messages dead-lettered: %+v", dlq)
	}
	for _, c := range claims(t, "spot") {
		if c.Name == victim.Name {
			t.Errorf("the interrupted claim %s is still there", c.Name)
		}
	}
}

func TestRestartMidLaunchBuysOneInstancePerClaim(t *testing.T) {
	pool(t, "restart", req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand))
	before := s.aws.Calls("CreateFleet")
	workers(t, "restart-workers", 4, map[string]string{"pool": "restart"}, nil)
	eventually(t, "a fleet", time.Minute, func(context.Context) (bool, error) { return s.aws.Calls("CreateFleet") > before, nil })
	stopCapstan(syscall.SIGKILL)
	if err := startCapstan(); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the workers Running after the restart", 2*time.Minute, running(t, "restart-workers", 4))
	live := s.aws.LiveInstances(karpv1.NodePoolLabelKey, "restart")
	perClaim := map[string]int{}
	for _, inst := range live {
		perClaim[inst.Tags[aws.NodeClaimTag]]++
	}
	ncs := claims(t, "restart")
	for _, c := range ncs {
		if perClaim[c.Name] != 1 {
			t.Errorf("NodeClaim %s has %d live instances", c.Name, perClaim[c.Name])
		}
		delete(perClaim, c.Name)
	}
	if len(perClaim) != 0 {
		t.Errorf("instances without a NodeClaim: %v", perClaim)
	}
}

func TestNewImageBehindTheAliasDriftsAndReplaces(t *testing.T) {
	pool(t, "drift", req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand),
		req(corev1.LabelArchStable, karpv1.NodeSelectorOpIn, "amd64"))
	workers(t, "drift-workers", 2, map[string]string{"pool": "drift"}, nil)
	eventually(t, "the workers Running", 2*time.Minute, running(t, "drift-workers", 2))
	old := claims(t, "drift")
	// A new AL2023 release: the alias's parameter points at a new image.
	param := "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id"
	prev := s.aws.Parameter(param)
	s.aws.AddImage(awsfake.Image{ID: "ami-0e2edrift00000001", Name: "amazon-eks-node-al2023-x86_64-standard-1.37-v20261201",
		Owner: "602401143452", Architecture: "x86_64", Created: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Tags: map[string]string{}})
	s.aws.SetParameter(param, "ami-0e2edrift00000001")
	t.Cleanup(func() { s.aws.SetParameter(param, prev) })
	// The class is resolved again at its next resync; a change of the class brings it forward.
	nc := &awsv1.EC2NodeClass{}
	if err := s.Client.Get(t.Context(), client.ObjectKey{Name: "drift"}, nc); err != nil {
		t.Fatal(err)
	}
	orig := nc.DeepCopy()
	nc.Annotations = map[string]string{"e2e.capstan.dev/poke": "1"}
	if err := s.Client.Patch(t.Context(), nc, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old claims replaced by claims on the new image", 3*time.Minute, func(ctx context.Context) (bool, error) {
		now := claims(t, "drift")
		for _, c := range now {
			for _, o := range old {
				if c.Name == o.Name {
					return false, nil
				}
			}
			if c.Status.ImageID != "ami-0e2edrift00000001" {
				return false, nil
			}
		}
		return len(now) > 0, nil
	})
	eventually(t, "the workers Running after the drift", 2*time.Minute, running(t, "drift-workers", 2))
}

func TestExpiredCredentialsAreNamedOnTheClaimAndNothingLeaks(t *testing.T) {
	pool(t, "expired", req(karpv1.CapacityTypeLabelKey, karpv1.NodeSelectorOpIn, karpv1.CapacityTypeOnDemand))
	d := workers(t, "expired-workers", 1, map[string]string{"pool": "expired"}, nil)
	eventually(t, "the first worker Running", 2*time.Minute, running(t, "expired-workers", 1))
	// The credentials expire while Capstan runs (an IRSA token it can no longer refresh).
	s.aws.ExpireCredentials("e2e", true)
	restored := false
	restore := func() {
		if !restored {
			s.aws.ExpireCredentials("e2e", false)
			restored = true
		}
	}
	t.Cleanup(restore)
	scaleTo(t, d, 3)
	eventually(t, "a claim saying why it cannot launch", time.Minute, func(context.Context) (bool, error) {
		for _, c := range claims(t, "expired") {
			if cond := meta.FindStatusCondition(c.Status.Conditions, karpv1.ConditionTypeLaunched); cond != nil &&
				cond.Status == metav1.ConditionFalse && strings.Contains(cond.Message, "ExpiredToken") {
				return true, nil
			}
		}
		return false, nil
	})
	restore()
	eventually(t, "the workers Running once the credentials work", 2*time.Minute, running(t, "expired-workers", 3))
	for _, c := range claims(t, "expired") {
		if n := len(s.aws.LiveInstances(aws.NodeClaimTag, c.Name)); n != 1 {
			t.Errorf("NodeClaim %s has %d instances", c.Name, n)
		}
	}
	if n, want := len(s.aws.LiveInstances(karpv1.NodePoolLabelKey, "expired")), len(claims(t, "expired")); n != want {
		t.Errorf("%d live instances for %d claims", n, want)
	}
}

func scaleTo(t testing.TB, d *appsv1.Deployment, n int32) {
	t.Helper()
	cur := &appsv1.Deployment{}
	if err := s.Client.Get(t.Context(), client.ObjectKeyFromObject(d), cur); err != nil {
		t.Fatal(err)
	}
	orig := cur.DeepCopy()
	cur.Spec.Replicas = &n
	if err := s.Client.Patch(t.Context(), cur, client.MergeFrom(orig)); err != nil {
		t.Fatal(err)
	}
}

func TestOrphanInstanceIsCollected(t *testing.T) {
	// An instance tagged for this cluster and a NodeClaim that does not exist (its claim lost),
	// with no user data: it never registers a Node.
	orphan := s.aws.RunInstance(awsfake.Instance{Type: "m6i.large", Tags: map[string]string{
		"kubernetes.io/cluster/" + cluster: "owned", karpv1.NodePoolLabelKey: "gone", aws.NodeClaimTag: "gone-abcde"}})
	eventually(t, "the orphan terminated by garbage collection", 2*time.Minute, func(context.Context) (bool, error) {
		for _, i := range s.aws.Instances() {
			if i.ID == orphan.ID {
				return i.State == "shutting-down" || i.State == "terminated", nil
			}
		}
		return false, nil
	})
}

// TestChartIdentityIsLeastPrivilege: Capstan, running as the chart's ServiceAccount, did every
// test's job without a denied call, and what it does not need is denied.
func TestChartIdentityIsLeastPrivilege(t *testing.T) {
	b, err := os.ReadFile(s.Log)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, "forbidden") {
			t.Errorf("a call was denied: %s", line)
		}
	}
	cfg := rest.CopyConfig(s.Cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	as, err := client.New(cfg, client.Options{Scheme: s.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for what, call := range map[string]func() error{
		"list secrets": func() error { return as.List(ctx, &corev1.SecretList{}) },
		"create a deployment": func() error {
			return as.Create(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "default"}})
		},
		"update another lease": func() error {
			return as.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-else", Namespace: "default"}})
		},
		"delete a NodePool": func() error { return as.DeleteAllOf(ctx, &karpv1.NodePool{}) },
		"write an EC2NodeClass spec": func() error {
			return as.Create(ctx, &awsv1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
		},
	} {
		if err := call(); !apierrors.IsForbidden(err) {
			t.Errorf("%s as %s: %v, want forbidden", what, serviceAccount, err)
		}
	}
	// And what it needs is allowed (a sample; the other tests exercise the rest).
	if err := as.List(ctx, &karpv1.NodeClaimList{}); err != nil {
		t.Errorf("list NodeClaims: %v", err)
	}
}
