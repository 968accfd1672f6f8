package awsfake

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Boot is what a machine's user data tells its kubelet, read the way each image family's boot
// reads it: nodeadm's NodeConfig parts (AL2023), the MIME parts and the bootstrap.sh call (AL2),
// the TOML settings (Bottlerocket), the PowerShell block (Windows).
type Boot struct {
	Cluster, Endpoint string
	Labels            map[string]string
	Taints            []corev1.Taint
	// Config is the kubelet configuration in KubeletConfiguration's names (maxPods,
	// podsPerCore, kubeReserved, systemReserved, evictionHard).
	Config map[string]any
}

// ReadBoot reads base64 user data as an image of the family boots it ("" reads as AL2023).
func ReadBoot(family, b64 string) (*Boot, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("user data is not base64: %w", err)
	}
	ud := string(raw)
	switch {
	case family == "al2023" || family == "":
		return bootNodeadm(ud)
	case family == "al2":
		return bootAL2(ud)
	case family == "bottlerocket":
		return bootBottlerocket(ud)
	case strings.HasPrefix(family, "windows"):
		return bootWindows(ud)
	}
	return nil, fmt.Errorf("unknown image family %q", family)
}

// mimeParts are the parts of a MIME multi-part document: content type and body.
func mimeParts(ud string) ([][2]string, error) {
	ud = strings.ReplaceAll(ud, "\r\n", "\n")
	head, body, ok := strings.Cut(ud, "\n\n")
	if !ok || !strings.HasPrefix(strings.TrimSpace(head), "MIME-Version:") {
		return nil, errors.New("user data is not a MIME document")
	}
	var boundary string
	for _, line := range strings.Split(head, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "Content-Type") {
			_, params, err := mime.ParseMediaType(strings.TrimSpace(v))
			if err != nil {
				return nil, err
			}
			boundary = params["boundary"]
		}
	}
	var out [][2]string
	r := multipart.NewReader(strings.NewReader(strings.ReplaceAll(body, "\n", "\r\n")), boundary)
	for {
		part, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading user data: %w", err)
		}
		b, err := io.ReadAll(part)
		if err != nil {
			return nil, err
		}
		out = append(out, [2]string{part.Header.Get("Content-Type"), strings.ReplaceAll(string(b), "\r\n", "\n")})
	}
}

// nodeConfig is what the fake reads of a NodeConfig.
type nodeConfig struct {
	Spec struct {
		Cluster struct {
			Name              string `json:"name"`
			APIServerEndpoint string `json:"apiServerEndpoint"`
		} `json:"cluster"`
		Kubelet struct {
			Config map[string]any `json:"config"`
			Flags  []string       `json:"flags"`
		} `json:"kubelet"`
	} `json:"spec"`
}

// ParseUserData merges the NodeConfig parts of base64 user data as nodeadm does (later parts
// win; flags are appended).
func ParseUserData(b64 string) (config map[string]any, flags []string, err error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, nil, fmt.Errorf("user data is not base64: %w", err)
	}
	var nc nodeConfig
	config, flags, err = mergeNodeConfigs(string(raw), &nc)
	return config, flags, err
}

func mergeNodeConfigs(ud string, merged *nodeConfig) (map[string]any, []string, error) {
	parts, err := mimeParts(ud)
	if err != nil {
		return nil, nil, err
	}
	config := map[string]any{}
	var flags []string
	for _, p := range parts {
		if !strings.HasPrefix(p[0], "application/node.eks.aws") {
			continue
		}
		var nc nodeConfig
		if err := yaml.Unmarshal([]byte(p[1]), &nc); err != nil {
			return nil, nil, fmt.Errorf("NodeConfig: %w", err)
		}
		for k, v := range nc.Spec.Kubelet.Config {
			config[k] = v
		}
		flags = append(flags, nc.Spec.Kubelet.Flags...)
		if nc.Spec.Cluster.Name != "" {
			merged.Spec.Cluster.Name = nc.Spec.Cluster.Name
		}
		if nc.Spec.Cluster.APIServerEndpoint != "" {
			merged.Spec.Cluster.APIServerEndpoint = nc.Spec.Cluster.APIServerEndpoint
		}
	}
	return config, flags, nil
}

func bootNodeadm(ud string) (*Boot, error) {
	var nc nodeConfig
	config, flags, err := mergeNodeConfigs(ud, &nc)
	if err != nil {
		return nil, err
	}
	b := &Boot{Cluster: nc.Spec.Cluster.Name, Endpoint: nc.Spec.Cluster.APIServerEndpoint, Config: config}
	return b, b.flags(flags)
}

// flags applies kubelet command-line flags (the last of a name wins, as the kubelet takes them).
func (b *Boot) flags(flags []string) error {
	if b.Config == nil {
		b.Config = map[string]any{}
	}
	if b.Labels == nil {
		b.Labels = map[string]string{}
	}
	last := map[string]string{}
	for _, f := range flags {
		name, v, ok := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !ok {
			return fmt.Errorf("kubelet flag %q has no value", f)
		}
		last[name] = strings.Trim(v, `"`)
	}
	pairs := func(v, sep string) map[string]any {
		m := map[string]any{}
		for _, kv := range strings.Split(v, ",") {
			if k, val, ok := strings.Cut(kv, sep); ok {
				m[k] = val
			}
		}
		return m
	}
	for name, v := range last {
		switch name {
		case "node-labels":
			for k, val := range pairs(v, "=") {
				b.Labels[k] = val.(string)
			}
		case "register-with-taints":
			b.Taints = nil
			for _, kv := range strings.Split(v, ",") {
				if kv == "" {
					continue
				}
				key, rest, _ := strings.Cut(kv, "=")
				val, effect, _ := strings.Cut(rest, ":")
				b.Taints = append(b.Taints, corev1.Taint{Key: key, Value: val, Effect: corev1.TaintEffect(effect)})
			}
		case "max-pods", "pods-per-core":
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("--%s=%s: %w", name, v, err)
			}
			b.Config[map[string]string{"max-pods": "maxPods", "pods-per-core": "podsPerCore"}[name]] = float64(n)
		case "kube-reserved", "system-reserved":
			b.Config[map[string]string{"kube-reserved": "kubeReserved", "system-reserved": "systemReserved"}[name]] = pairs(v, "=")
		case "eviction-hard":
			b.Config["evictionHard"] = pairs(v, "<")
		}
	}
	return nil
}

// bootAL2 reads AL2's user data: a MIME document whose shell script calls
// /etc/eks/bootstrap.sh CLUSTER --apiserver-endpoint … --kubelet-extra-args '…', read with a bash
// parser (ShellCommands); bootstrap.sh passes the extra arguments to the kubelet unquoted, so
// they split on white space.
func bootAL2(ud string) (*Boot, error) {
	parts, err := mimeParts(ud)
	if err != nil {
		return nil, err
	}
	// A script may first merge a JSON document into the kubelet's configuration file with jq
	// (the AMI's bootstrap.sh then edits that file): its heredoc is read.
	merged := map[string]any{}
	for _, p := range parts {
		if !strings.HasPrefix(p[0], "text/x-shellscript") {
			continue
		}
		if _, rest, ok := strings.Cut(p[1], "<<'CAPSTAN_KUBELET'\n"); ok && strings.Contains(p[1], "jq -s '.[0] * .[1]' /etc/kubernetes/kubelet/kubelet-config.json") {
			doc, _, _ := strings.Cut(rest, "\nCAPSTAN_KUBELET\n")
			if err := json.Unmarshal([]byte(doc), &merged); err != nil {
				return nil, fmt.Errorf("kubelet configuration merged before bootstrap.sh: %w", err)
			}
			continue
		}
		if !strings.Contains(p[1], "/etc/eks/bootstrap.sh") {
			continue
		}
		cmds, err := ShellCommands(p[1])
		if err != nil {
			return nil, fmt.Errorf("AL2 bootstrap script: %w", err)
		}
		for _, c := range cmds {
			if len(c) < 2 || c[0] != "/etc/eks/bootstrap.sh" {
				continue
			}
			b := &Boot{Cluster: c[1], Config: merged}
			b.Endpoint = argAfter(c, "--apiserver-endpoint")
			if err := b.flags(strings.Fields(argAfter(c, "--kubelet-extra-args"))); err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	return nil, errors.New("AL2 user data without a call of /etc/eks/bootstrap.sh")
}

// argAfter is the word after name in a command's words, or "".
func argAfter(words []string, name string) string {
	for i := 1; i+1 < len(words); i++ {
		if words[i] == name {
			return words[i+1]
		}
	}
	return ""
}

// bootWindows reads Windows user data: one <powershell> block calling Start-EKSBootstrap.ps1 with
// single-quoted arguments (PowerShellArg).
func bootWindows(ud string) (*Boot, error) {
	t := strings.TrimSpace(ud)
	if !strings.HasPrefix(t, "<powershell>") || !strings.HasSuffix(t, "</powershell>") || strings.Count(t, "<powershell>") != 1 {
		return nil, errors.New("windows user data is not one <powershell> block")
	}
	for _, line := range strings.Split(t, "\n") {
		if !strings.HasPrefix(line, "& $EKSBootstrapScriptFile ") {
			continue
		}
		cluster, _ := PowerShellArg(line, "-EKSClusterName")
		b := &Boot{Cluster: cluster}
		b.Endpoint, _ = PowerShellArg(line, "-APIServerEndpoint")
		args, _ := PowerShellArg(line, "-KubeletExtraArgs")
		if err := b.flags(strings.Fields(args)); err != nil {
			return nil, err
		}
		return b, nil
	}
	return nil, errors.New("windows user data without a call of Start-EKSBootstrap.ps1")
}

// bottlerocketKeys are the settings.kubernetes keys this fake's Bottlerocket accepts; like the
// real one it refuses user data naming any other.
var bottlerocketKeys = map[string]bool{
	"api-server": true, "cluster-certificate": true, "cluster-name": true, "cluster-dns-ip": true, "node-labels": true,
	"node-taints": true, "max-pods": true, "kube-reserved": true, "system-reserved": true, "eviction-hard": true,
	"eviction-soft": true, "eviction-soft-grace-period": true, "eviction-max-pod-grace-period": true,
	"image-gc-high-threshold-percent": true, "image-gc-low-threshold-percent": true, "cpu-cfs-quota-enforced": true,
	"allowed-unsafe-sysctls": true, "shutdown-grace-period": true, "registry-qps": true, "seccomp-default": true,
	"pod-pids-limit": true,
}

// bootBottlerocket reads Bottlerocket's TOML settings.
func bootBottlerocket(ud string) (*Boot, error) {
	var doc struct {
		Settings map[string]any `toml:"settings"`
	}
	if err := toml.Unmarshal([]byte(ud), &doc); err != nil {
		return nil, fmt.Errorf("bottlerocket user data is not TOML: %w", err)
	}
	kube, _ := doc.Settings["kubernetes"].(map[string]any)
	b := &Boot{Labels: map[string]string{}, Config: map[string]any{}}
	for k, v := range kube {
		if !bottlerocketKeys[k] {
			return nil, fmt.Errorf("bottlerocket refuses settings.kubernetes.%s", k)
		}
		switch k {
		case "cluster-name":
			b.Cluster, _ = v.(string)
		case "api-server":
			b.Endpoint, _ = v.(string)
		case "node-labels":
			m, _ := v.(map[string]any)
			for lk, lv := range m {
				b.Labels[lk] = fmt.Sprint(lv)
			}
		case "node-taints":
			m, _ := v.(map[string]any)
			for tk, tv := range m {
				list, _ := tv.([]any)
				for _, e := range list {
					val, effect, _ := strings.Cut(fmt.Sprint(e), ":")
					b.Taints = append(b.Taints, corev1.Taint{Key: tk, Value: val, Effect: corev1.TaintEffect(effect)})
				}
			}
		case "max-pods":
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("settings.kubernetes.max-pods is a %T, not an integer", v)
			}
			b.Config["maxPods"] = float64(n)
		case "pod-pids-limit":
			n, ok := v.(int64)
			if !ok {
				return nil, fmt.Errorf("settings.kubernetes.pod-pids-limit is a %T, not an integer", v)
			}
			b.Config["podPidsLimit"] = float64(n)
		case "shutdown-grace-period":
			b.Config["shutdownGracePeriod"] = v
		case "kube-reserved", "system-reserved", "eviction-hard":
			b.Config[map[string]string{"kube-reserved": "kubeReserved", "system-reserved": "systemReserved", "eviction-hard": "evictionHard"}[k]] = v
		}
	}
	return b, nil
}
