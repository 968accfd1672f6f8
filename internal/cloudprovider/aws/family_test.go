package aws_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws"
	"capstan.dev/capstan/internal/controllers/ec2nodeclass"
	"capstan.dev/capstan/test/awsfake"
	"capstan.dev/capstan/test/awsfake/awstest"
)

// TestEveryFamilyBootsItsNode launches a machine of each image family through the real SDK
// against the local endpoints; the fake kubelet boots it from its user data the way the
// family's image does (nodeadm's NodeConfig, bootstrap.sh's arguments, Bottlerocket's TOML,
// the PowerShell block), so a family whose data names the wrong cluster, loses the labels,
// taints or maxPods, or carries a setting the image refuses registers no Node or the wrong one.
func TestEveryFamilyBootsItsNode(t *testing.T) {
	for _, c := range []struct {
		alias, kube, userData string
		os, imagePrefix       string
	}{
		{alias: "al2023@latest", kube: "1.37", os: "linux", imagePrefix: "amazon-eks-node-al2023-x86_64-standard-1.37-",
			userData: "#!/bin/bash\necho class-script\n"},
		{alias: "al2@latest", kube: "1.32", os: "linux", imagePrefix: "amazon-eks-node-1.32-",
			userData: "#!/bin/bash\necho class-script\n"},
		{alias: "bottlerocket@latest", kube: "1.37", os: "linux", imagePrefix: "bottlerocket-aws-k8s-1.37-x86_64-",
			// An unknown kubernetes key (Bottlerocket would refuse the whole user data), a key
			// Capstan owns, and a section of the user's own.
			userData: "[settings.kubernetes]\nmax-pods = 5\ncluster-name = \"other\"\nmade-up-setting = 1\n" +
				"[settings.kubernetes.node-labels]\nteam = \"storage\"\n[settings.host-containers.admin]\nenabled = true\n"},
		{alias: "windows2022@latest", kube: "1.37", os: "windows", imagePrefix: "Windows_Server-2022-English-Core-EKS_Optimized-1.37-",
			userData: "<powershell>\nWrite-Host class-script\n</powershell>"},
	} {
		family, _, _ := strings.Cut(c.alias, "@")
		t.Run(family, func(t *testing.T) {
			f := awstest.New(t, env.Client)
			f.KubeVersion = c.kube
			nc, np := f.Orders(t)
			nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: c.alias}}
			nc.Spec.AMIFamily = nil
			nc.Spec.UserData = &c.userData
			nc.Spec.Kubelet = &awsv1.KubeletConfiguration{MaxPods: ptr(int32(30))}
			nc = resolved(t, f, nc)
			claim := claimFor(nc, np, "boot-"+family, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
			got, inst, node := launchAndBoot(t, f, claim)
			img, _ := f.AWS.ImageByID(inst.ImageID)
			if !strings.HasPrefix(img.Name, c.imagePrefix) {
				t.Errorf("launched image %s, want %s…", img.Name, c.imagePrefix)
			}
			if node.Labels[karpv1.NodePoolLabelKey] != "orders" || node.Labels["workload"] != "orders" || node.Labels[corev1.LabelOSStable] != c.os {
				t.Errorf("node labels %v", node.Labels)
			}
			if got.Labels[corev1.LabelOSStable] != c.os {
				t.Errorf("claim labels %v, want os %s", got.Labels, c.os)
			}
			for _, want := range []corev1.Taint{karpv1.UnregisteredNoExecuteTaint, {Key: "workload", Value: "orders", Effect: corev1.TaintEffectNoSchedule}} {
				if !slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool { return t.MatchTaint(&want) }) {
					t.Errorf("node taints %v, want %v", node.Spec.Taints, want)
				}
			}
			if node.Status.Capacity.Pods().Value() != 30 {
				t.Errorf("pods capacity %v, want the class's maxPods 30", node.Status.Capacity.Pods())
			}
			for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourcePods, corev1.ResourceEphemeralStorage} {
				a, b := node.Status.Allocatable[name], got.Status.Allocatable[name]
				if a.Cmp(b) != 0 {
					t.Errorf("%s: Node allocatable %s, NodeClaim's %s", name, a.String(), b.String())
				}
			}
			if family == "bottlerocket" {
				if node.Labels["team"] != "storage" {
					t.Errorf("node labels %v: the class's own node-labels are kept", node.Labels)
				}
				cond := meta.FindStatusCondition(nc.Status.Conditions, awsv1.ConditionTypeValidationSucceeded)
				if cond == nil || !strings.Contains(cond.Message, "settings.kubernetes.made-up-setting") {
					t.Errorf("ValidationSucceeded %+v: want the dropped setting named", cond)
				}
			}
			if c.os == "windows" && node.Labels[corev1.LabelWindowsBuild] != "10.0.20348" {
				t.Errorf("node labels %v: want Windows Server 2022's build", node.Labels)
			}
		})
	}
}

// TestAL2PastItsLastVersionSaysSo: Amazon publishes no AL2 images after Kubernetes 1.32; the
// class's AMIsReady condition says so and what to use instead.
func TestAL2PastItsLastVersionSaysSo(t *testing.T) {
	f := awstest.New(t, env.Client)
	nc, _ := f.Orders(t)
	nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2@latest"}}
	nc.Spec.AMIFamily = nil
	nc.Name = "al2-on-137"
	got, _ := reconciled(t, f, nc)
	cond := meta.FindStatusCondition(got.Status.Conditions, awsv1.ConditionTypeAMIsReady)
	if cond == nil || cond.Status != "False" || !strings.Contains(cond.Message, "1.32") || !strings.Contains(cond.Message, "al2023") {
		t.Errorf("AMIsReady %+v: want False, naming the last AL2 version and al2023", cond)
	}
}

// TestGPUTypesBootTheGPUImage: an alias's NVIDIA image serves the GPU types, its standard image
// the others (as the status lists each image with what it serves).
func TestGPUTypesBootTheGPUImage(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}
	nc.Spec.AMIFamily = nil
	nc = resolved(t, f, nc)
	for _, c := range []struct{ instanceType, param string }{
		{"g5.xlarge", "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/nvidia/recommended/image_id"},
		{"inf2.xlarge", "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/neuron/recommended/image_id"},
		{"m6i.large", "/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id"},
	} {
		claim := claimFor(nc, np, "gpu-"+strings.ReplaceAll(c.instanceType, ".", "-"), nil)
		claim.Spec.Requirements = []karpv1.NodeSelectorRequirementWithMinValues{
			{Key: corev1.LabelInstanceTypeStable, Operator: karpv1.NodeSelectorOpIn, Values: []string{c.instanceType}},
			{Key: karpv1.NodePoolLabelKey, Operator: karpv1.NodeSelectorOpIn, Values: []string{np.Name}},
		}
		claim.Spec.Taints = nil
		if _, err := f.Provider.Create(ctx, claim); err != nil {
			t.Fatalf("%s: %v", c.instanceType, err)
		}
		inst := f.AWS.LiveInstances(aws.NodeClaimTag, claim.Name)[0]
		if want := f.AWS.Parameter(c.param); inst.ImageID != want || want == "" {
			t.Errorf("%s booted %s, want %s (%s)", c.instanceType, inst.ImageID, want, c.param)
		}
	}
}

// TestDeprecatedImagesBootOnlyWithoutACurrentOne: a class whose terms select only a deprecated
// image still launches with it (Karpenter does the same); once a current image matches too, it
// is the one booted.
func TestDeprecatedImagesBootOnlyWithoutACurrentOne(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	old := awsfake.Image{ID: "ami-0deprecated000001", Name: "team-golden-2026-01", Owner: "123456789012", Architecture: "x86_64",
		Created: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), Deprecated: true, Tags: map[string]string{}}
	f.AWS.AddImage(old)
	nc, np := f.Orders(t)
	nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Name: "team-golden-*", Owner: "self"}}
	nc.Spec.AMIFamily = ptr("AL2023")
	nc = resolved(t, f, nc)
	launch := func(name string) string {
		if _, err := f.Provider.Create(ctx, claimFor(nc, np, name, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})); err != nil {
			t.Fatal(err)
		}
		return f.AWS.LiveInstances(aws.NodeClaimTag, name)[0].ImageID
	}
	if got := launch("golden-a"); got != old.ID {
		t.Errorf("booted %s, want the only (deprecated) image %s", got, old.ID)
	}
	current := old
	current.ID, current.Name, current.Deprecated, current.Created = "ami-0current00000001", "team-golden-2026-11", false, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	f.AWS.AddImage(current)
	c := &ec2nodeclass.Controller{Client: env.Client, Provider: f.Provider, Clock: f.Clock}
	if _, err := c.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(nc)}); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(nc), nc); err != nil {
		t.Fatal(err)
	}
	if got := launch("golden-b"); got != current.ID {
		t.Errorf("booted %s, want the current image %s (status %+v)", got, current.ID, nc.Status.AMIs)
	}
}

// TestKubeletFieldsPassThroughTheAPIServer: a class's kubelet field Capstan does not model is
// stored, read back and written into the machine's configuration; one the kubelet does not know
// leaves the class not ready, naming it.
func TestKubeletFieldsPassThroughTheAPIServer(t *testing.T) {
	ctx := context.Background()
	f := awstest.New(t, env.Client)
	nc, np := f.Orders(t)
	nc.Spec.Kubelet = &awsv1.KubeletConfiguration{}
	if err := nc.Spec.Kubelet.UnmarshalJSON([]byte(`{"maxPods": 30, "podPidsLimit": 4096}`)); err != nil {
		t.Fatal(err)
	}
	nc = resolved(t, f, nc)
	if raw := nc.Spec.Kubelet.Extra["podPidsLimit"].Raw; string(raw) != "4096" {
		t.Fatalf("read back spec.kubelet %+v", nc.Spec.Kubelet)
	}
	claim := claimFor(nc, np, "kubelet-extra", corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
	if _, err := f.Provider.Create(ctx, claim); err != nil {
		t.Fatal(err)
	}
	for _, lt := range f.AWS.LaunchTemplates() {
		boot, err := awsfake.ReadBoot("al2023", lt.Data["UserData"])
		if err != nil {
			t.Fatal(err)
		}
		if boot.Config["podPidsLimit"] != float64(4096) {
			t.Errorf("kubelet config %v: want podPidsLimit 4096", boot.Config)
		}
	}

	bad, _ := f.Orders(t)
	bad.Spec.Kubelet = &awsv1.KubeletConfiguration{}
	if err := bad.Spec.Kubelet.UnmarshalJSON([]byte(`{"podPidLimit": 4096}`)); err != nil {
		t.Fatal(err)
	}
	bad.Name = "kubelet-typo"
	bad, _ = reconciled(t, f, bad)
	cond := meta.FindStatusCondition(bad.Status.Conditions, awsv1.ConditionTypeValidationSucceeded)
	if cond == nil || cond.Status != "False" || cond.Reason != "KubeletConfigurationInvalid" || !strings.Contains(cond.Message, "spec.kubelet.podPidLimit") ||
		meta.IsStatusConditionTrue(bad.Status.Conditions, awsv1.ConditionTypeReady) {
		t.Errorf("conditions %+v: want ValidationSucceeded False naming spec.kubelet.podPidLimit, and not Ready", bad.Status.Conditions)
	}
}

// TestAnAliasWhoseParameterNamesAMissingImageResolves: one of an alias's SSM parameters still
// names an image EC2 no longer has (deregistered, or not shared to the account). EC2 refuses a
// DescribeImages that names it (InvalidAMIID.NotFound), so the images are looked up by filter:
// the class resolves with the images that exist. Before, the whole class failed to resolve.
func TestAnAliasWhoseParameterNamesAMissingImageResolves(t *testing.T) {
	f := awstest.New(t, env.Client)
	f.AWS.SetParameter("/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/arm64/standard/recommended/image_id", "ami-0deregistered00001")
	nc, _ := f.Orders(t)
	nc.Spec.AMISelectorTerms = []awsv1.AMISelectorTerm{{Alias: "al2023@latest"}}
	nc = resolved(t, f, nc)
	var ids []string
	for _, a := range nc.Status.AMIs {
		ids = append(ids, a.ID)
	}
	if len(ids) == 0 || slices.Contains(ids, "ami-0deregistered00001") {
		t.Fatalf("status.amis %v, want the alias's images that exist", ids)
	}
}
