package amifamily_test

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
	"capstan.dev/capstan/test/awsfake"
)

func TestAliasQueries(t *testing.T) {
	params := func(qs []amifamily.Query) []string {
		var out []string
		for _, q := range qs {
			out = append(out, q.Parameter)
		}
		return out
	}
	for _, c := range []struct {
		alias, kube string
		want        []string
	}{
		{"al2023@latest", "1.37", []string{
			"/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/standard/recommended/image_id",
			"/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
			"/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/x86_64/neuron/recommended/image_id",
			"/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/arm64/standard/recommended/image_id",
			"/aws/service/eks/optimized-ami/1.37/amazon-linux-2023/arm64/nvidia/recommended/image_id"}},
		{"al2023@v20261120", "1.36", []string{
			"/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.36-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/nvidia/amazon-eks-node-al2023-x86_64-nvidia-1.36-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/x86_64/neuron/amazon-eks-node-al2023-x86_64-neuron-1.36-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/arm64/standard/amazon-eks-node-al2023-arm64-standard-1.36-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.36/amazon-linux-2023/arm64/nvidia/amazon-eks-node-al2023-arm64-nvidia-1.36-v20261120/image_id"}},
		{"al2@v20261120", "1.32", []string{
			"/aws/service/eks/optimized-ami/1.32/amazon-linux-2/amazon-eks-node-1.32-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/amazon-eks-gpu-node-1.32-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.32/amazon-linux-2-gpu/amazon-eks-gpu-node-1.32-v20261120/image_id",
			"/aws/service/eks/optimized-ami/1.32/amazon-linux-2-arm64/amazon-eks-arm64-node-1.32-v20261120/image_id"}},
		{"bottlerocket@v1.51.0", "1.37", []string{
			"/aws/service/bottlerocket/aws-k8s-1.37/x86_64/1.51.0/image_id",
			"/aws/service/bottlerocket/aws-k8s-1.37-nvidia/x86_64/1.51.0/image_id",
			"/aws/service/bottlerocket/aws-k8s-1.37/arm64/1.51.0/image_id",
			"/aws/service/bottlerocket/aws-k8s-1.37-nvidia/arm64/1.51.0/image_id"}},
		{"bottlerocket@latest", "1.37", []string{
			"/aws/service/bottlerocket/aws-k8s-1.37/x86_64/latest/image_id",
			"/aws/service/bottlerocket/aws-k8s-1.37-nvidia/x86_64/latest/image_id",
			"/aws/service/bottlerocket/aws-k8s-1.37/arm64/latest/image_id",
			"/aws/service/bottlerocket/aws-k8s-1.37-nvidia/arm64/latest/image_id"}},
		{"windows2025@latest", "1.37", []string{"/aws/service/ami-windows-latest/Windows_Server-2025-English-Core-EKS_Optimized-1.37/image_id"}},
	} {
		qs, err := amifamily.AliasQueries(c.alias, c.kube)
		if err != nil {
			t.Errorf("%s: %v", c.alias, err)
			continue
		}
		if got := params(qs); !slices.Equal(got, c.want) {
			t.Errorf("%s on %s:\n got %q\nwant %q", c.alias, c.kube, got, c.want)
		}
	}
	var ae *amifamily.AliasError
	if _, err := amifamily.AliasQueries("al2@latest", "1.33"); !errors.As(err, &ae) || !strings.Contains(err.Error(), "al2023") {
		t.Errorf("al2 on 1.33: %v, want an AliasError pointing to al2023", err)
	}
	if _, err := amifamily.AliasQueries("windows2022@v1", "1.37"); err == nil {
		t.Error("a pinned Windows alias resolved")
	}
}

func TestImagesServeTheirVariantsTypes(t *testing.T) {
	qs, err := amifamily.AliasQueries("al2@latest", "1.32")
	if err != nil {
		t.Fatal(err)
	}
	serving := func(labels map[string]string) []string {
		var out []string
		for _, q := range qs {
			if amifamily.Serves(q.Requirements, labels) {
				out = append(out, strings.Split(q.Parameter, "/")[6]) // the image's directory
			}
		}
		return out
	}
	for _, c := range []struct {
		labels map[string]string
		want   []string
	}{
		{map[string]string{corev1.LabelArchStable: "amd64"}, []string{"amazon-linux-2"}},
		{map[string]string{corev1.LabelArchStable: "arm64"}, []string{"amazon-linux-2-arm64"}},
		{map[string]string{corev1.LabelArchStable: "amd64", awsv1.LabelInstanceGPUCount: "1"}, []string{"amazon-linux-2-gpu"}},
		{map[string]string{corev1.LabelArchStable: "amd64", awsv1.LabelInstanceAcceleratorCount: "1"}, []string{"amazon-linux-2-gpu"}},
		{map[string]string{corev1.LabelArchStable: "arm64", awsv1.LabelInstanceGPUCount: "1"}, nil},
	} {
		if got := serving(c.labels); !slices.Equal(got, c.want) {
			t.Errorf("%v served by %v, want %v", c.labels, got, c.want)
		}
	}
}

func bootstrap(custom string) amifamily.Bootstrap {
	return amifamily.Bootstrap{ClusterName: "prod", Endpoint: "https://kube:6443", CABundle: "Q0E=",
		Labels: map[string]string{"karpenter.sh/nodepool": "default", "team": "capstan"},
		Taints: []corev1.Taint{{Key: "karpenter.sh/unregistered", Effect: corev1.TaintEffectNoExecute}, {Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule}},
		Kubelet: &awsv1.KubeletConfiguration{MaxPods: ptr(int32(42)), KubeReserved: awsv1.ReservedResources{"cpu": "200m"},
			EvictionHard: awsv1.EvictionThresholds{"memory.available": "5%"}},
		Custom: custom}
}

func ptr[T any](v T) *T { return &v }

// TestEachFamilyBootsWhatItIsTold reads each family's user data back as its image would (the
// fake's independent readers) and finds the cluster, labels, taints and kubelet settings.
func TestEachFamilyBootsWhatItIsTold(t *testing.T) {
	for _, c := range []struct {
		family amifamily.Family
		fake   string
	}{{amifamily.AL2, "al2"}, {amifamily.AL2023, "al2023"}, {amifamily.Bottlerocket, "bottlerocket"}, {amifamily.Windows2019, "windows2019"}} {
		ud, err := amifamily.UserData(c.family, bootstrap(""))
		if err != nil {
			t.Fatalf("%s: %v", c.family, err)
		}
		b, err := awsfake.ReadBoot(c.fake, base64.StdEncoding.EncodeToString([]byte(ud)))
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.family, err, ud)
		}
		if b.Cluster != "prod" || b.Endpoint != "https://kube:6443" || b.Labels["team"] != "capstan" || b.Labels["karpenter.sh/nodepool"] != "default" ||
			len(b.Taints) != 2 || b.Config["maxPods"] != float64(42) {
			t.Errorf("%s booted %+v from\n%s", c.family, b, ud)
		}
		if kr, _ := b.Config["kubeReserved"].(map[string]any); kr["cpu"] != "200m" {
			t.Errorf("%s: kubeReserved %v", c.family, b.Config["kubeReserved"])
		}
		if eh, _ := b.Config["evictionHard"].(map[string]any); eh["memory.available"] != "5%" {
			t.Errorf("%s: evictionHard %v", c.family, b.Config["evictionHard"])
		}
	}
}

func TestBottlerocketMergesTheClassSettings(t *testing.T) {
	custom := `unknown-top = 1
[settings.kubernetes]
cluster-name = "elsewhere"
max-pods = 5
not-a-setting = "x"
[settings.kubernetes.node-labels]
team = "storage"
owner = "alice"
[settings.kubernetes.node-taints]
dedicated = ["db:NoSchedule"]
[settings.host-containers.admin]
enabled = true
[settings.autoscaling]
should-wait = true
`
	ud, err := amifamily.UserData(amifamily.Bottlerocket, bootstrap(custom))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := toml.Unmarshal([]byte(ud), &doc); err != nil {
		t.Fatal(err)
	}
	settings := doc["settings"].(map[string]any)
	kube := settings["kubernetes"].(map[string]any)
	labels := kube["node-labels"].(map[string]any)
	taints := kube["node-taints"].(map[string]any)
	switch {
	case len(doc) != 1:
		t.Errorf("top-level keys %v, want settings only", doc)
	case kube["cluster-name"] != "prod" || kube["max-pods"] != int64(42):
		t.Errorf("kubernetes %v: Capstan's cluster and the class's kubelet maxPods win", kube)
	case kube["not-a-setting"] != nil:
		t.Errorf("kubernetes %v: an unknown setting is kept", kube)
	case labels["team"] != "capstan" || labels["owner"] != "alice":
		t.Errorf("node-labels %v: Capstan's win, the class's others stay", labels)
	case taints["dedicated"] != nil || taints["gpu"] == nil:
		t.Errorf("node-taints %v: the NodePool's taints only", taints)
	case settings["host-containers"] == nil:
		t.Errorf("settings %v: the class's own sections stay", settings)
	case settings["autoscaling"].(map[string]any)["should-wait"] != false:
		t.Errorf("autoscaling %v: nodes join no Auto Scaling group", settings["autoscaling"])
	}
	dropped := amifamily.Dropped(amifamily.Bottlerocket, custom, nil)
	for _, want := range []string{"unknown-top", "settings.kubernetes.not-a-setting", "settings.kubernetes.node-taints"} {
		if !slices.ContainsFunc(dropped, func(d string) bool { return strings.HasPrefix(d, want) }) {
			t.Errorf("dropped %v, want %s named", dropped, want)
		}
	}
	if err := amifamily.Validate(amifamily.Bottlerocket, "settings = ["); err == nil || !strings.Contains(err.Error(), "spec.userData") {
		t.Errorf("TOML that does not parse: %v, want an error naming spec.userData", err)
	}
}

func TestScriptFamiliesKeepTheClassDataFirst(t *testing.T) {
	al2, err := amifamily.UserData(amifamily.AL2, bootstrap("#!/bin/bash\necho mine\n"))
	if err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(al2, "echo mine"), strings.Index(al2, "/etc/eks/bootstrap.sh"); i < 0 || j < i {
		t.Errorf("AL2: want the class's script before bootstrap.sh:\n%s", al2)
	}
	if !strings.Contains(al2, "--use-max-pods false") {
		t.Errorf("AL2 with maxPods: bootstrap.sh must not set its own:\n%s", al2)
	}
	win, err := amifamily.UserData(amifamily.Windows2022, bootstrap("<powershell>\nWrite-Host mine\n</powershell>"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(win, "<powershell>") != 1 || strings.Index(win, "Write-Host mine") > strings.Index(win, "Start-EKSBootstrap.ps1") {
		t.Errorf("Windows: want one block, the class's script first:\n%s", win)
	}
	custom := "#!/bin/bash\n/opt/my-bootstrap --cluster prod\n"
	if got, err := amifamily.UserData(amifamily.Custom, bootstrap(custom)); err != nil || got != custom {
		t.Errorf("Custom: %q, %v; want the class's data unchanged", got, err)
	}
}

// TestUnmodelledKubeletFieldsReachTheKubelet: spec.kubelet's fields beyond the typed ones reach
// each family's kubelet as its image reads them (nodeadm's config, the AL2 configuration file
// merged before bootstrap.sh, Bottlerocket's settings), and a family that cannot pass one says so.
func TestUnmodelledKubeletFieldsReachTheKubelet(t *testing.T) {
	k := &awsv1.KubeletConfiguration{MaxPods: ptr(int32(42)), Extra: map[string]runtime.RawExtension{
		"podPidsLimit": {Raw: []byte("4096")}, "shutdownGracePeriod": {Raw: []byte(`"45s"`)}, "featureGates": {Raw: []byte(`{"SidecarContainers":true}`)}}}
	for _, c := range []struct {
		family amifamily.Family
		fake   string
	}{{amifamily.AL2, "al2"}, {amifamily.AL2023, "al2023"}, {amifamily.Bottlerocket, "bottlerocket"}} {
		b := bootstrap("")
		b.Kubelet = k
		ud, err := amifamily.UserData(c.family, b)
		if err != nil {
			t.Fatal(err)
		}
		boot, err := awsfake.ReadBoot(c.fake, base64.StdEncoding.EncodeToString([]byte(ud)))
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.family, err, ud)
		}
		if boot.Config["podPidsLimit"] != float64(4096) || boot.Config["shutdownGracePeriod"] != "45s" || boot.Config["maxPods"] != float64(42) {
			t.Errorf("%s: kubelet config %v", c.family, boot.Config)
		}
	}
	if got := amifamily.Dropped(amifamily.Bottlerocket, "", k); !slices.Equal(got, []string{"spec.kubelet.featureGates"}) {
		t.Errorf("Bottlerocket leaves out %v, want featureGates (it has no setting for it)", got)
	}
	if got := amifamily.Dropped(amifamily.Windows2022, "", k); len(got) != 3 {
		t.Errorf("Windows leaves out %v, want every unmodelled field", got)
	}
	if got := amifamily.Dropped(amifamily.AL2023, "", k); got != nil {
		t.Errorf("AL2023 leaves out %v", got)
	}
}

func TestKubeletFieldsAreTheKubeletsOwn(t *testing.T) {
	for _, c := range []struct {
		extra, want string // want: "" for valid, else a substring of the error
	}{
		{`{"podPidsLimit": 4096, "cpuManagerPolicy": "static", "featureGates": {"A": true}}`, ""},
		{`{"podPidLimit": 4096}`, "spec.kubelet.podPidLimit: the kubelet's configuration (kubelet.config.k8s.io/v1beta1) has no such field"},
		{`{"podPidsLimit": "many"}`, "spec.kubelet.podPidsLimit: a string where the kubelet takes int64"},
	} {
		k := &awsv1.KubeletConfiguration{}
		if err := k.UnmarshalJSON([]byte(c.extra)); err != nil {
			t.Fatal(err)
		}
		err := amifamily.ValidateKubelet(k)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.extra, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want %q", c.extra, err, c.want)
		}
	}
}

// TestUserDataRefusesValuesNoKubeletTakes: a label or taint value the kubelet would refuse (here,
// one that would run code in a naively quoted script) gets every family an *InvalidValueError
// naming the field, and no user data.
func TestUserDataRefusesValuesNoKubeletTakes(t *testing.T) {
	for _, c := range []struct {
		name  string
		edit  func(*amifamily.Bootstrap)
		field string
	}{
		{"taint value", func(b *amifamily.Bootstrap) { b.Taints[1].Value = "x';touch /tmp/p;'" }, "taints[1].value"},
		{"taint key", func(b *amifamily.Bootstrap) { b.Taints[1].Key = "gpu$(id)" }, "taints[1].key"},
		{"taint effect", func(b *amifamily.Bootstrap) { b.Taints[1].Effect = "NoSchedule --v=9" }, "taints[1].effect"},
		{"label value", func(b *amifamily.Bootstrap) { b.Labels["team"] = "a\ntouch /tmp/p" }, "labels[team]"},
		{"label key", func(b *amifamily.Bootstrap) { b.Labels["team `id`"] = "a" }, "labels"},
	} {
		for _, family := range []amifamily.Family{amifamily.AL2, amifamily.AL2023, amifamily.Bottlerocket, amifamily.Windows2022, amifamily.Custom} {
			b := bootstrap("")
			c.edit(&b)
			ud, err := amifamily.UserData(family, b)
			var invalid *amifamily.InvalidValueError
			if !errors.As(err, &invalid) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("%s, %s: got %v (user data %q); want an InvalidValueError naming %s", c.name, family, err, ud, c.field)
			}
		}
	}
}
