// Package aws is the chaos suite's scenarios on the local AWS endpoints (test/awsfake): Capstan
// with --cloud-provider=aws and an interruption queue, on a local cluster whose fake kubelet
// boots the endpoints' instances.
package aws

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"

	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/e2e"
)

const (
	cluster = "capstan-chaos"
	queue   = "capstan-chaos-interruption"
)

var (
	h     *e2e.Harness
	cloud *awsfake.Server
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	e2e.Main(m, "capstan-chaos-aws-", &h, func(hs *e2e.Harness) (func(), error) {
		var err error
		if cloud, err = awsfake.New(awsfake.Options{ClusterName: cluster}); err != nil {
			return nil, err
		}
		cloud.CreateQueue(queue+"-dlq", "", 0)
		cloud.CreateQueue(queue, queue+"-dlq", 3)
		if err := cloud.Start(); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _ = (&awsfake.Kubelet{Server: cloud, Client: hs.Client, Kwok: true}).Start(ctx) }()
		teardown := func() { cancel(); cloud.Close() }
		return teardown, start(hs)
	})
}

// start runs capstan on the local AWS endpoints with env added (a crash point).
func start(hs *e2e.Harness, env ...string) error {
	return hs.Start([]string{"--kubeconfig", hs.Cluster.KubeconfigPath, "--disable-leader-election",
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:0",
		"--cloud-provider=aws", "--cluster-name=" + cluster, "--aws-endpoint-url=" + cloud.URL(), "--aws-region=" + cloud.Region(),
		"--interruption-queue=" + queue, "--batch-idle-duration=1s", "--batch-max-duration=5s"},
		append([]string{"AWS_ACCESS_KEY_ID=chaos", "AWS_SECRET_ACCESS_KEY=chaos", "AWS_EC2_METADATA_DISABLED=true"}, env...)...)
}

var (
	setting = e2e.ChaosSetting
	figures = e2e.ChaosFigures
)

func eventually(t testing.TB, what string, timeout time.Duration, cond func(context.Context) (bool, error)) {
	t.Helper()
	e2e.Eventually(t, what, timeout, cond, h.Dump)
}

// pool creates an EC2NodeClass and a NodePool named name of c and m amd64 machines of the
// capacity type; mutate, if any, edits the NodePool.
func pool(t testing.TB, name, capacityType string, mutate func(*karpv1.NodePool)) {
	t.Helper()
	nc := &awsv1.EC2NodeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: awsv1.EC2NodeClassSpec{
		Role:                       "KarpenterNodeRole-" + cluster,
		AMISelectorTerms:           []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}},
		SubnetSelectorTerms:        []awsv1.SubnetSelectorTerm{{Tags: awsv1.SelectorTags{"karpenter.sh/discovery": cluster}}},
		SecurityGroupSelectorTerms: []awsv1.SecurityGroupSelectorTerm{{Tags: awsv1.SelectorTags{"karpenter.sh/discovery": cluster}}},
	}}
	np := &karpv1.NodePool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	np.Spec.Template.ObjectMeta.Labels = map[string]string{"pool": name}
	np.Spec.Template.Spec.NodeClassRef = &karpv1.NodeClassReference{Group: awsv1.Group, Kind: "EC2NodeClass", Name: name}
	np.Spec.Template.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
		{Key: karpv1.CapacityTypeLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{capacityType}},
		{Key: awsv1.LabelInstanceCategory, Operator: karpv1.NodeSelectorOpIn, Values: []string{"c", "m"}},
		{Key: karpv1.ArchLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{karpv1.ArchitectureAmd64}},
	}
	if mutate != nil {
		mutate(np)
	}
	for _, o := range []client.Object{nc, np} {
		if err := h.Client.Create(t.Context(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// spreadDeployment creates replicas pods of app name (500m, 512Mi) that each need a machine of
// their own (required hostname anti-affinity) of the pool named name.
func spreadDeployment(t testing.TB, name string, replicas int32) {
	t.Helper()
	labels := map[string]string{"app": name}
	grace := int64(0)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
				TerminationGracePeriodSeconds: &grace, NodeSelector: map[string]string{"pool": name},
				Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey: corev1.LabelHostname, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}}},
				Containers: []corev1.Container{{Name: "w", Image: "pause", Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("512Mi")}}}},
			}}}}
	if err := h.Client.Create(t.Context(), d); err != nil {
		t.Fatal(err)
	}
}

// orphans counts the pool's live instances whose NodeClaim does not exist.
func orphans(t testing.TB, name string) int {
	t.Helper()
	live := map[string]bool{}
	for _, c := range h.Claims(t, name) {
		live[c.Name] = true
	}
	n := 0
	for _, inst := range cloud.LiveInstances(karpv1.NodePoolLabelKey, name) {
		if !live[inst.Tags[aws.NodeClaimTag]] {
			n++
		}
	}
	return n
}

// instancesPerClaim counts every instance the endpoint ever launched for the pool, terminated or
// not, by its NodeClaim — a double purchase shows even after garbage collection has terminated
// the extra machine — and fails the test for a claim with more than one, or a claim that exists
// without exactly one; it returns the counts and the most a claim launched.
func instancesPerClaim(t *testing.T, name string) (launched map[string]int, most int) {
	t.Helper()
	launched = map[string]int{}
	for _, inst := range cloud.Instances() {
		if inst.Tags[karpv1.NodePoolLabelKey] == name {
			launched[inst.Tags[aws.NodeClaimTag]]++
		}
	}
	for claim, k := range launched {
		if k > 1 {
			t.Errorf("NodeClaim %s launched %d instances", claim, k)
		}
		most = max(most, k)
	}
	for _, c := range h.Claims(t, name) {
		if launched[c.Name] != 1 {
			t.Errorf("NodeClaim %s has %d instances", c.Name, launched[c.Name])
		}
	}
	return launched, most
}
