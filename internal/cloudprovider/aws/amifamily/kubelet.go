package amifamily

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	awsv1 "capstan.dev/capstan/api/aws/v1"
)

// ValidateKubelet checks spec.kubelet against the kubelet's own configuration type
// (KubeletConfiguration of kubelet.config.k8s.io/v1beta1, k8s.io/kubelet v0.37): a field the
// kubelet does not know, or a value of the wrong type, is refused with an error naming
// spec.kubelet.<field>. The CRD cannot: CEL does not see the fields it keeps unmodelled.
func ValidateKubelet(k *awsv1.KubeletConfiguration) error {
	if k == nil {
		return nil
	}
	raw, err := json.Marshal(k)
	if err != nil {
		return fmt.Errorf("spec.kubelet: %w", err)
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	var upstream kubeletv1beta1.KubeletConfiguration
	if err := d.Decode(&upstream); err != nil {
		return fmt.Errorf("spec.kubelet%s", describeJSONError(err))
	}
	return nil
}

var (
	unknownField = regexp.MustCompile(`unknown field "([^"]+)"`)
	wrongType    = regexp.MustCompile(`cannot unmarshal (\w+) into Go struct field KubeletConfiguration\.(\S+) of type (\S+)`)
)

// describeJSONError turns encoding/json's message into ".field: what is wrong".
func describeJSONError(err error) string {
	if m := unknownField.FindStringSubmatch(err.Error()); m != nil {
		return "." + m[1] + ": the kubelet's configuration (kubelet.config.k8s.io/v1beta1) has no such field"
	}
	if m := wrongType.FindStringSubmatch(err.Error()); m != nil {
		return "." + m[2] + ": a " + m[1] + " where the kubelet takes " + m[3]
	}
	return ": " + err.Error()
}

// extraConfig is the class's unmodelled kubelet fields, decoded.
func extraConfig(k *awsv1.KubeletConfiguration) map[string]any {
	if k == nil || len(k.Extra) == 0 {
		return nil
	}
	out := map[string]any{}
	for name, raw := range k.Extra {
		var v any
		if err := json.Unmarshal(raw.Raw, &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// bottlerocketKubelet maps kubelet configuration fields to the Bottlerocket settings that set
// them; a field without one cannot reach a Bottlerocket node's kubelet.
var bottlerocketKubelet = map[string]string{
	"allowedUnsafeSysctls": "allowed-unsafe-sysctls", "clusterDomain": "cluster-domain",
	"containerLogMaxFiles": "container-log-max-files", "containerLogMaxSize": "container-log-max-size",
	"containerLogMaxWorkers": "container-log-max-workers", "containerLogMonitorInterval": "container-log-monitor-interval",
	"cpuManagerPolicy": "cpu-manager-policy", "cpuManagerReconcilePeriod": "cpu-manager-reconcile-period",
	"eventBurst": "event-burst", "eventRecordQPS": "event-qps", "kubeAPIBurst": "kube-api-burst", "kubeAPIQPS": "kube-api-qps",
	"memoryManagerPolicy": "memory-manager-policy", "podPidsLimit": "pod-pids-limit", "registryBurst": "registry-burst",
	"registryPullQPS": "registry-qps", "seccompDefault": "seccomp-default", "serverTLSBootstrap": "server-tls-bootstrap",
	"shutdownGracePeriod": "shutdown-grace-period", "shutdownGracePeriodCriticalPods": "shutdown-grace-period-for-critical-pods",
	"singleProcessOOMKill": "single-process-oom-kill", "topologyManagerPolicy": "topology-manager-policy",
	"topologyManagerScope": "topology-manager-scope",
}

// unappliedKubelet names the class's unmodelled kubelet fields a family cannot pass to its
// kubelet: Windows' bootstrap writes the kubelet's configuration itself, and Bottlerocket takes
// only the fields it has settings for.
func unappliedKubelet(f Family, k *awsv1.KubeletConfiguration) []string {
	if k == nil {
		return nil
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(k.Extra)) {
		if f.Windows() || f == Bottlerocket && bottlerocketKubelet[name] == "" {
			out = append(out, "spec.kubelet."+name)
		}
	}
	return out
}

// al2KubeletMerge is the script, run before bootstrap.sh, that merges the class's unmodelled
// kubelet fields into the AMI's kubelet configuration file (which bootstrap.sh then edits).
func al2KubeletMerge(k *awsv1.KubeletConfiguration) (string, error) {
	extra := extraConfig(k)
	if len(extra) == 0 {
		return "", nil
	}
	raw, err := json.MarshalIndent(extra, "", "  ")
	if err != nil {
		return "", err
	}
	var s strings.Builder
	s.WriteString("#!/bin/bash -e\n")
	s.WriteString("cat > /etc/kubernetes/kubelet/capstan-kubelet.json <<'CAPSTAN_KUBELET'\n")
	s.Write(raw)
	s.WriteString("\nCAPSTAN_KUBELET\n")
	s.WriteString("jq -s '.[0] * .[1]' /etc/kubernetes/kubelet/kubelet-config.json /etc/kubernetes/kubelet/capstan-kubelet.json > /tmp/kubelet-config.json\n")
	s.WriteString("mv /tmp/kubelet-config.json /etc/kubernetes/kubelet/kubelet-config.json\n")
	return s.String(), nil
}
