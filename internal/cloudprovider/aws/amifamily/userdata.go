package amifamily

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"mime/multipart"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"mvdan.cc/sh/v3/syntax"
	"sigs.k8s.io/yaml"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
)

// Bootstrap is what a node's user data tells it: which cluster to join, how, and the kubelet's
// labels, taints and configuration; Custom is the class's own spec.userData.
type Bootstrap struct {
	ClusterName, Endpoint, CABundle, CIDR string
	// Labels are the labels the kubelet registers with (only those it may set on itself).
	Labels map[string]string
	// Taints are the taints it registers with (karpenter.sh/unregistered first).
	Taints  []corev1.Taint
	Kubelet *awsv1.KubeletConfiguration
	Custom  string
}

// UserData is the family's user data for b (not yet base64-encoded), with the class's own data
// merged as the family takes it:
//   - AL2: a MIME multi-part document, the class's parts (a script when not MIME) first, then a
//     script merging spec.kubelet's unmodelled fields into the kubelet's configuration file,
//     and the bootstrap.sh script last;
//   - AL2023: a MIME document, Capstan's NodeConfig first and the class's parts after it
//     (nodeadm merges them in order, the last winning);
//   - Bottlerocket: TOML, the class's settings with Capstan's keys winning and what Bottlerocket
//     would not accept dropped (Dropped lists them);
//   - Windows: one PowerShell block, the class's script before the EKS bootstrap call;
//   - Custom: the class's data unchanged; the image must join the cluster itself (with the
//     karpenter.sh/unregistered taint).
//
// Labels and taints the kubelet could not register with are refused (an *InvalidValueError),
// whatever the API let through; every value is also quoted for the interpreter that reads it
// (bash, PowerShell, TOML, YAML), so none can run as code.
func UserData(f Family, b Bootstrap) (string, error) {
	if err := validateNodeValues(b); err != nil {
		return "", err
	}
	switch {
	case f == AL2:
		return al2(b)
	case f == AL2023:
		return nodeadm(b)
	case f == Bottlerocket:
		s, _, err := bottlerocket(b)
		return s, err
	case f.Windows():
		return windows(b)
	case f == Custom:
		return b.Custom, nil
	}
	return "", fmt.Errorf("spec.amiFamily: unknown family %q", f)
}

// InvalidValueError means a label or taint given to UserData is one no kubelet registers a node
// with; no user data is built from it.
type InvalidValueError struct{ Errs field.ErrorList }

func (e *InvalidValueError) Error() string {
	return "node labels and taints: " + e.Errs.ToAggregate().Error()
}

// validateNodeValues checks b's labels and taints as the API server checks a Node's.
func validateNodeValues(b Bootstrap) error {
	errs := karpv1.ValidateNodeLabels(b.Labels, field.NewPath("labels"))
	errs = append(errs, karpv1.ValidateTaints(b.Taints, field.NewPath("taints"))...)
	if len(errs) > 0 {
		return &InvalidValueError{Errs: errs}
	}
	return nil
}

// Validate checks that the class's user data can be merged for its family; the error names
// spec.userData.
func Validate(f Family, custom string) error {
	if strings.TrimSpace(custom) == "" {
		return nil
	}
	var err error
	switch {
	case f == AL2, f == AL2023:
		_, err = classParts(custom, shellScript)
	case f == Bottlerocket:
		_, _, err = bottlerocket(Bootstrap{Custom: custom})
	}
	if err != nil {
		return fmt.Errorf("spec.userData: %w", err)
	}
	return nil
}

// nodeConfigMediaType is nodeadm's MIME type.
const nodeConfigMediaType = "application/node.eks.aws"

// NodeConfig is the part of AL2023's nodeadm configuration Capstan writes.
type NodeConfig struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Spec       NodeConfigSpec `json:"spec"`
}

// NodeConfigSpec is a NodeConfig's spec.
type NodeConfigSpec struct {
	Cluster NodeConfigCluster `json:"cluster"`
	Kubelet NodeConfigKubelet `json:"kubelet"`
}

// NodeConfigCluster says which cluster the node joins.
type NodeConfigCluster struct {
	Name                 string `json:"name"`
	APIServerEndpoint    string `json:"apiServerEndpoint"`
	CertificateAuthority string `json:"certificateAuthority,omitempty"`
	CIDR                 string `json:"cidr,omitempty"`
}

// NodeConfigKubelet is the kubelet's configuration and flags.
type NodeConfigKubelet struct {
	Config map[string]any `json:"config,omitempty"`
	Flags  []string       `json:"flags,omitempty"`
}

// part is one part of a MIME multi-part document.
type part struct{ contentType, body string }

// shellScript is the content type of a script part.
const shellScript = "text/x-shellscript; charset=\"us-ascii\""

// mimeDocument is a multipart/mixed document of the parts. Its boundary is "//" (as EKS's own
// documents have it) unless a part holds "--//", which a reader would take for the start of a
// part: then the first of "//1", "//2", … that no part holds.
func mimeDocument(parts []part) (string, error) {
	boundary := "//"
	for i := 1; slices.ContainsFunc(parts, func(p part) bool { return strings.Contains(p.body, "--"+boundary) }); i++ {
		boundary = "//" + strconv.Itoa(i)
	}
	var b strings.Builder
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary(boundary); err != nil {
		return "", err
	}
	fmt.Fprintf(&b, "MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=%q\r\n\r\n", boundary)
	for _, p := range parts {
		pw, err := w.CreatePart(textproto.MIMEHeader{"Content-Type": {p.contentType}})
		if err != nil {
			return "", err
		}
		if _, err := pw.Write([]byte(p.body)); err != nil {
			return "", err
		}
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return b.String(), nil
}

// labelFlag and taintFlag are the kubelet's --node-labels and --register-with-taints values.
func labelFlag(labels map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return strings.Join(kv, ",")
}

func taintFlag(taints []corev1.Taint) string {
	var kv []string
	for _, t := range taints {
		kv = append(kv, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	return strings.Join(kv, ",")
}

// nodeadm is AL2023's user data: Capstan's NodeConfig, then the class's parts.
//
// The kubelet settings written are the class's own: what the class leaves unset (maxPods,
// kube-reserved, eviction thresholds) nodeadm derives from the instance type, so one template
// serves every type of an image.
func nodeadm(b Bootstrap) (string, error) {
	cfg := map[string]any{}
	if k := b.Kubelet; k != nil {
		set := func(name string, v any, ok bool) {
			if ok {
				cfg[name] = v
			}
		}
		set("maxPods", deref(k.MaxPods), k.MaxPods != nil)
		set("podsPerCore", deref(k.PodsPerCore), k.PodsPerCore != nil)
		set("kubeReserved", k.KubeReserved, len(k.KubeReserved) > 0)
		set("systemReserved", k.SystemReserved, len(k.SystemReserved) > 0)
		set("evictionHard", k.EvictionHard, len(k.EvictionHard) > 0)
		set("evictionSoft", k.EvictionSoft, len(k.EvictionSoft) > 0)
		set("evictionSoftGracePeriod", k.EvictionSoftGracePeriod, len(k.EvictionSoftGracePeriod) > 0)
		set("evictionMaxPodGracePeriod", deref(k.EvictionMaxPodGracePeriod), k.EvictionMaxPodGracePeriod != nil)
		set("clusterDNS", k.ClusterDNS, len(k.ClusterDNS) > 0)
		set("cpuCFSQuota", deref(k.CPUCFSQuota), k.CPUCFSQuota != nil)
		set("imageGCHighThresholdPercent", deref(k.ImageGCHighThresholdPercent), k.ImageGCHighThresholdPercent != nil)
		set("imageGCLowThresholdPercent", deref(k.ImageGCLowThresholdPercent), k.ImageGCLowThresholdPercent != nil)
		for name, v := range extraConfig(k) {
			set(name, v, cfg[name] == nil)
		}
	}
	doc := NodeConfig{APIVersion: "node.eks.aws/v1alpha1", Kind: "NodeConfig", Spec: NodeConfigSpec{
		Cluster: NodeConfigCluster{Name: b.ClusterName, APIServerEndpoint: b.Endpoint, CertificateAuthority: b.CABundle, CIDR: b.CIDR},
		Kubelet: NodeConfigKubelet{Config: cfg, Flags: []string{"--node-labels=" + labelFlag(b.Labels), "--register-with-taints=" + taintFlag(b.Taints)}},
	}}
	y, err := yaml.Marshal(doc)
	if err != nil {
		return "", err
	}
	parts := []part{{nodeConfigMediaType, string(y)}}
	if strings.TrimSpace(b.Custom) != "" {
		ct := shellScript
		if strings.Contains(b.Custom, "kind: NodeConfig") {
			ct = nodeConfigMediaType
		}
		class, err := classParts(b.Custom, ct)
		if err != nil {
			return "", fmt.Errorf("spec.userData: %w", err)
		}
		parts = append(parts, class...)
	}
	return mimeDocument(parts)
}

// al2 is AL2's user data: the class's parts, then the script calling /etc/eks/bootstrap.sh.
func al2(b Bootstrap) (string, error) {
	script, err := al2Bootstrap(b)
	if err != nil {
		return "", err
	}
	merge, err := al2KubeletMerge(b.Kubelet)
	if err != nil {
		return "", err
	}
	var parts []part
	if strings.TrimSpace(b.Custom) != "" {
		class, err := classParts(b.Custom, shellScript)
		if err != nil {
			return "", fmt.Errorf("spec.userData: %w", err)
		}
		parts = class
	}
	if merge != "" {
		parts = append(parts, part{shellScript, merge})
	}
	return mimeDocument(append(parts, part{shellScript, script}))
}

// al2Bootstrap is the script calling /etc/eks/bootstrap.sh. Every value is one bash word, quoted
// by mvdan.cc/sh's Quote, whatever it holds.
func al2Bootstrap(b Bootstrap) (string, error) {
	args := [][]string{{"/etc/eks/bootstrap.sh", b.ClusterName, "--apiserver-endpoint", b.Endpoint}}
	if b.CABundle != "" {
		args[0] = append(args[0], "--b64-cluster-ca", b.CABundle)
	}
	if k := b.Kubelet; k != nil && len(k.ClusterDNS) > 0 {
		args = append(args, []string{"--dns-cluster-ip", k.ClusterDNS[0]})
	}
	if k := b.Kubelet; k != nil && k.MaxPods != nil {
		// bootstrap.sh would otherwise set --max-pods from the ENI limits after ours.
		args = append(args, []string{"--use-max-pods", "false"})
	}
	args = append(args, []string{"--kubelet-extra-args", strings.Join(kubeletArgs(b), " ")})
	call, err := bashCommand(args)
	if err != nil {
		return "", err
	}
	return "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n" + call + "\n", nil
}

// bashCommand is one bash command of the words in lines, each quoted for bash, the lines
// continued with a backslash. A word bash cannot hold (one with a NUL byte) is an error.
func bashCommand(lines [][]string) (string, error) {
	var out []string
	for _, words := range lines {
		quoted := make([]string, len(words))
		for i, w := range words {
			q, err := syntax.Quote(w, syntax.LangBash)
			if err != nil {
				return "", fmt.Errorf("quoting %q for bash: %w", w, err)
			}
			quoted[i] = q
		}
		out = append(out, strings.Join(quoted, " "))
	}
	return strings.Join(out, " \\\n"), nil
}

// windows is the Windows families' user data: one PowerShell block, the class's script (without
// its own <powershell> tags) before the call of the EKS bootstrap script. Every value is a
// PowerShell single-quoted string (psQuote); one holding a <powershell> tag, which EC2Launch would
// take for the block's end, is refused.
func windows(b Bootstrap) (string, error) {
	extraArgs := strings.Join(kubeletArgs(b), " ")
	values := []string{b.ClusterName, b.Endpoint, b.CABundle, extraArgs}
	if k := b.Kubelet; k != nil {
		values = append(values, k.ClusterDNS...)
	}
	for _, v := range values {
		if l := strings.ToLower(v); strings.Contains(l, "<powershell>") || strings.Contains(l, "</powershell>") {
			return "", fmt.Errorf("%q: a value in Windows user data may not hold a <powershell> tag", v)
		}
	}
	var s strings.Builder
	s.WriteString("<powershell>\n")
	if c := strings.TrimSpace(b.Custom); c != "" {
		c = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(c, "<powershell>"), "</powershell>"))
		s.WriteString(c + "\n")
	}
	s.WriteString("[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n")
	fmt.Fprintf(&s, "& $EKSBootstrapScriptFile -EKSClusterName %s -APIServerEndpoint %s", psQuote(b.ClusterName), psQuote(b.Endpoint))
	if b.CABundle != "" {
		fmt.Fprintf(&s, " -Base64ClusterCA %s", psQuote(b.CABundle))
	}
	fmt.Fprintf(&s, " -KubeletExtraArgs %s", psQuote(extraArgs))
	if k := b.Kubelet; k != nil && len(k.ClusterDNS) > 0 {
		fmt.Fprintf(&s, " -DNSClusterIP %s", psQuote(k.ClusterDNS[0]))
	}
	s.WriteString("\n</powershell>")
	return s.String(), nil
}

// psQuoteDoubler doubles each character PowerShell takes for a single quote: the apostrophe and
// the four typographic single quotes (its language specification, "single-quote-character").
var psQuoteDoubler = strings.NewReplacer("'", "''", "\u2018", "\u2018\u2018", "\u2019", "\u2019\u2019", "\u201a", "\u201a\u201a", "\u201b", "\u201b\u201b")

// psQuote is s as a PowerShell single-quoted string, in which nothing is expanded: each
// single-quote character inside is doubled, which PowerShell reads as that one character.
func psQuote(s string) string {
	return "'" + psQuoteDoubler.Replace(s) + "'"
}

// kubeletArgs are the kubelet flags of the script-bootstrapped families (AL2, Windows): labels,
// taints and the class's kubelet settings.
func kubeletArgs(b Bootstrap) []string {
	args := []string{"--node-labels=" + labelFlag(b.Labels), "--register-with-taints=" + taintFlag(b.Taints)}
	k := b.Kubelet
	if k == nil {
		return args
	}
	mapArg := func(name string, m map[string]string, sep string) {
		if len(m) == 0 {
			return
		}
		var kv []string
		for _, key := range slices.Sorted(maps.Keys(m)) {
			kv = append(kv, key+sep+m[key])
		}
		args = append(args, "--"+name+"="+strings.Join(kv, ","))
	}
	if k.MaxPods != nil {
		args = append(args, "--max-pods="+strconv.Itoa(int(*k.MaxPods)))
	}
	if k.PodsPerCore != nil {
		args = append(args, "--pods-per-core="+strconv.Itoa(int(*k.PodsPerCore)))
	}
	mapArg("system-reserved", plain(k.SystemReserved), "=")
	mapArg("kube-reserved", plain(k.KubeReserved), "=")
	mapArg("eviction-hard", plain(k.EvictionHard), "<")
	mapArg("eviction-soft", plain(k.EvictionSoft), "<")
	if len(k.EvictionSoftGracePeriod) > 0 {
		grace := map[string]string{}
		for s, d := range k.EvictionSoftGracePeriod {
			grace[s] = d.Duration.String()
		}
		mapArg("eviction-soft-grace-period", grace, "=")
	}
	if k.EvictionMaxPodGracePeriod != nil {
		args = append(args, "--eviction-max-pod-grace-period="+strconv.Itoa(int(*k.EvictionMaxPodGracePeriod)))
	}
	if k.ImageGCHighThresholdPercent != nil {
		args = append(args, "--image-gc-high-threshold="+strconv.Itoa(int(*k.ImageGCHighThresholdPercent)))
	}
	if k.ImageGCLowThresholdPercent != nil {
		args = append(args, "--image-gc-low-threshold="+strconv.Itoa(int(*k.ImageGCLowThresholdPercent)))
	}
	if k.CPUCFSQuota != nil {
		args = append(args, "--cpu-cfs-quota="+strconv.FormatBool(*k.CPUCFSQuota))
	}
	return args
}

// classParts are the class's user data as parts: the parts of a MIME document, or the whole as
// one part of content type ct.
func classParts(ud, ct string) ([]part, error) {
	trimmed := strings.TrimSpace(ud)
	if !strings.HasPrefix(trimmed, "MIME-Version:") && !strings.HasPrefix(trimmed, "Content-Type:") {
		return []part{{ct, ud}}, nil
	}
	headerEnd := strings.Index(ud, "\n\n")
	if i := strings.Index(ud, "\r\n\r\n"); i >= 0 && (headerEnd < 0 || i < headerEnd) {
		headerEnd = i
	}
	if headerEnd < 0 {
		return nil, errors.New("a MIME document without a body")
	}
	var boundary string
	for _, line := range strings.Split(ud[:headerEnd], "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if strings.EqualFold(k, "Content-Type") {
			_, params, err := mime.ParseMediaType(strings.TrimSpace(v))
			if err != nil {
				return nil, fmt.Errorf("Content-Type %q: %w", v, err)
			}
			boundary = params["boundary"]
		}
	}
	if boundary == "" {
		return nil, errors.New("a MIME document without a multipart boundary")
	}
	var parts []part
	r := multipart.NewReader(strings.NewReader(ud[headerEnd:]), boundary)
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return parts, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading MIME part: %w", err)
		}
		body, err := io.ReadAll(p)
		if err != nil {
			return nil, err
		}
		parts = append(parts, part{p.Header.Get("Content-Type"), string(body)})
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// plain is a map of string-kinded values as plain strings.
func plain[V ~string](m map[string]V) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}
