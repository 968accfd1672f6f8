// Package amifamily knows the EKS image families an EC2NodeClass may boot — AL2, AL2023,
// Bottlerocket, Windows and Custom — as Karpenter v1.15 defines them: which public SSM
// parameters an alias resolves through, which instance types each image serves, and the user
// data that bootstraps a node of each family.
package amifamily

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	"capstan.dev/capstan/internal/requirements"
)

// Family is an image family; its values are EC2NodeClass spec.amiFamily's.
type Family string

// The families.
const (
	AL2          Family = "AL2"
	AL2023       Family = "AL2023"
	Bottlerocket Family = "Bottlerocket"
	Windows2019  Family = "Windows2019"
	Windows2022  Family = "Windows2022"
	Windows2025  Family = "Windows2025"
	Custom       Family = "Custom"
)

// families maps an alias's family name to the family.
var families = map[string]Family{"al2": AL2, "al2023": AL2023, "bottlerocket": Bottlerocket,
	"windows2019": Windows2019, "windows2022": Windows2022, "windows2025": Windows2025}

// Of is the family of a class: spec.amiFamily when set, else its alias's family (the CRD
// requires one of the two), else Custom.
func Of(spec *awsv1.EC2NodeClassSpec) Family {
	if spec.AMIFamily != nil && *spec.AMIFamily != "" {
		return Family(*spec.AMIFamily)
	}
	for _, t := range spec.AMISelectorTerms {
		if name, _, ok := strings.Cut(t.Alias, "@"); ok {
			if f, ok := families[strings.ToLower(name)]; ok {
				return f
			}
		}
	}
	return Custom
}

// Windows reports whether the family boots Windows.
func (f Family) Windows() bool { return strings.HasPrefix(string(f), "Windows") }

// WindowsBuild is the node.kubernetes.io/windows-build value of a Windows family's nodes.
func (f Family) WindowsBuild() string {
	switch f {
	case Windows2019:
		return "10.0.17763"
	case Windows2022:
		return "10.0.20348"
	case Windows2025:
		return "10.0.26100"
	}
	return ""
}

// OS is the kubernetes.io/os value of the family's nodes.
func (f Family) OS() string {
	if f.Windows() {
		return string(corev1.Windows)
	}
	return string(corev1.Linux)
}

// Query is one public SSM parameter an alias reads and the instance types the image it names
// serves. An image may answer several queries (AL2's GPU image serves GPU and accelerator
// types); it then serves the types of any of them.
type Query struct {
	Parameter    string
	Requirements []awsv1.AMIRequirement
}

// Requirement sets of the image variants.
var (
	standard = []awsv1.AMIRequirement{
		{Key: awsv1.LabelInstanceGPUCount, Operator: string(corev1.NodeSelectorOpDoesNotExist)},
		{Key: awsv1.LabelInstanceAcceleratorCount, Operator: string(corev1.NodeSelectorOpDoesNotExist)},
	}
	nvidia = []awsv1.AMIRequirement{{Key: awsv1.LabelInstanceGPUCount, Operator: string(corev1.NodeSelectorOpExists)}}
	neuron = []awsv1.AMIRequirement{{Key: awsv1.LabelInstanceAcceleratorCount, Operator: string(corev1.NodeSelectorOpExists)}}
)

// arch prefixes a variant's requirements with an architecture.
func arch(a string, variant []awsv1.AMIRequirement) []awsv1.AMIRequirement {
	return append([]awsv1.AMIRequirement{{Key: corev1.LabelArchStable, Operator: string(corev1.NodeSelectorOpIn), Values: []string{a}}}, variant...)
}

// LastAL2Version is the last Kubernetes minor version Amazon publishes EKS AL2 images for.
const LastAL2Version = "1.32"

// AliasError is an alias that cannot be resolved for the cluster; its message says why and what
// to use instead.
type AliasError struct{ Alias, Reason string }

func (e *AliasError) Error() string { return fmt.Sprintf("alias %s: %s", e.Alias, e.Reason) }

// AliasQueries are the SSM parameters an alias (family@version) resolves through on a cluster
// of kubeVersion ("1.37"), with what each image serves. AL2 has no images past
// LastAL2Version; Windows aliases take only "latest" (the CRD says so too).
func AliasQueries(alias, kubeVersion string) ([]Query, error) {
	name, version, _ := strings.Cut(alias, "@")
	f, ok := families[strings.ToLower(name)]
	if !ok {
		return nil, &AliasError{alias, "unknown family; want al2, al2023, bottlerocket, windows2019, windows2022 or windows2025"}
	}
	if version == "" {
		version = "latest"
	}
	latest := version == "latest"
	switch f {
	case AL2:
		if minorAfter(kubeVersion, LastAL2Version) {
			return nil, &AliasError{alias, fmt.Sprintf("Amazon publishes no EKS AL2 images for Kubernetes %s (the last is %s); use al2023 or bottlerocket",
				kubeVersion, LastAL2Version)}
		}
		path := func(dir, image string) string {
			leaf := "recommended"
			if !latest {
				leaf = fmt.Sprintf("%s-%s-%s", image, kubeVersion, version)
			}
			return fmt.Sprintf("/aws/service/eks/optimized-ami/%s/%s/%s/image_id", kubeVersion, dir, leaf)
		}
		gpu := path("amazon-linux-2-gpu", "amazon-eks-gpu-node")
		return []Query{
			{path("amazon-linux-2", "amazon-eks-node"), arch("amd64", standard)},
			{gpu, arch("amd64", nvidia)},
			{gpu, arch("amd64", neuron)},
			{path("amazon-linux-2-arm64", "amazon-eks-arm64-node"), arch("arm64", standard)},
		}, nil
	case AL2023:
		var out []Query
		for _, a := range []struct {
			kube, ssm string
			variants  []string
		}{{"amd64", "x86_64", []string{"standard", "nvidia", "neuron"}}, {"arm64", "arm64", []string{"standard", "nvidia"}}} {
			for _, v := range a.variants {
				leaf := "recommended"
				if !latest {
					leaf = fmt.Sprintf("amazon-eks-node-al2023-%s-%s-%s-%s", a.ssm, v, kubeVersion, version)
				}
				out = append(out, Query{fmt.Sprintf("/aws/service/eks/optimized-ami/%s/amazon-linux-2023/%s/%s/%s/image_id", kubeVersion, a.ssm, v, leaf),
					arch(a.kube, map[string][]awsv1.AMIRequirement{"standard": standard, "nvidia": nvidia, "neuron": neuron}[v])})
			}
		}
		return out, nil
	case Bottlerocket:
		// Bottlerocket's parameters name releases without the "v" its aliases may carry.
		v := strings.TrimPrefix(version, "v")
		var out []Query
		for _, a := range []struct{ kube, ssm string }{{"amd64", "x86_64"}, {"arm64", "arm64"}} {
			out = append(out,
				Query{fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s/%s/%s/image_id", kubeVersion, a.ssm, v), arch(a.kube, standard)},
				Query{fmt.Sprintf("/aws/service/bottlerocket/aws-k8s-%s-nvidia/%s/%s/image_id", kubeVersion, a.ssm, v), arch(a.kube, nvidia)})
		}
		return out, nil
	default: // Windows
		if !latest {
			return nil, &AliasError{alias, "Windows aliases take only the version latest"}
		}
		year := strings.TrimPrefix(string(f), "Windows")
		return []Query{{fmt.Sprintf("/aws/service/ami-windows-latest/Windows_Server-%s-English-Core-EKS_Optimized-%s/image_id", year, kubeVersion),
			append(arch("amd64", nil),
				awsv1.AMIRequirement{Key: corev1.LabelOSStable, Operator: string(corev1.NodeSelectorOpIn), Values: []string{string(corev1.Windows)}},
				awsv1.AMIRequirement{Key: corev1.LabelWindowsBuild, Operator: string(corev1.NodeSelectorOpIn), Values: []string{f.WindowsBuild()}})}}, nil
	}
}

// minorAfter reports whether Kubernetes version a ("1.33") is later than b.
func minorAfter(a, b string) bool {
	pa, pb := minor(a), minor(b)
	return pa > pb
}

func minor(v string) int {
	_, m, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	if i := strings.IndexFunc(m, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		m = m[:i]
	}
	n, _ := strconv.Atoi(m)
	return n
}

// Serves reports whether an image with these requirements serves an instance type with these
// labels (every requirement holds, as a node selector would judge it).
func Serves(reqs []awsv1.AMIRequirement, labels map[string]string) bool {
	for _, r := range reqs {
		req, err := requirements.New(r.Key, requirements.Operator(r.Operator), r.Values...)
		if err != nil {
			return false
		}
		if v, has := labels[r.Key]; has && !req.Allows(v) || !has && !req.AllowsAbsent() {
			return false
		}
	}
	return true
}

// Volume is a default EBS volume of a family's machines (gp3, encrypted, deleted with the
// machine).
type Volume struct {
	Device  string
	SizeGiB int32
}

// DefaultVolumes are the volumes a family's machines get when the class names none: one root
// volume of 20 GiB (Windows: 50 GiB), and for Bottlerocket a 4 GiB OS volume and a 20 GiB data
// volume, which holds what pods write.
func (f Family) DefaultVolumes() []Volume {
	switch {
	case f == Bottlerocket:
		return []Volume{{"/dev/xvda", 4}, {"/dev/xvdb", 20}}
	case f.Windows():
		return []Volume{{"/dev/sda1", 50}}
	}
	return []Volume{{"/dev/xvda", 20}}
}

// EphemeralDevice is the device whose volume holds the kubelet's ephemeral storage.
func (f Family) EphemeralDevice() string {
	v := f.DefaultVolumes()
	return v[len(v)-1].Device
}
