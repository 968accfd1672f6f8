package amifamily

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	awsv1 "capstan.dev/capstan/api/aws/v1"
)

// bottlerocketKubernetes are the settings.kubernetes keys Bottlerocket accepts (its settings
// reference); a class's user data keeps these, and any other key there is dropped, since
// Bottlerocket refuses user data naming a setting it does not know.
var bottlerocketKubernetes = map[string]bool{
	"allowed-unsafe-sysctls": true, "api-server": true, "authentication-mode": true, "bootstrap-token": true,
	"cloud-provider": true, "cluster-certificate": true, "cluster-dns-ip": true, "cluster-domain": true, "cluster-name": true,
	"container-log-max-files": true, "container-log-max-size": true, "container-log-max-workers": true,
	"container-log-monitor-interval": true, "cpu-cfs-quota-enforced": true, "cpu-manager-policy": true,
	"cpu-manager-policy-options": true, "cpu-manager-reconcile-period": true, "credential-providers": true,
	"device-ownership-from-security-context": true, "event-burst": true, "event-qps": true, "eviction-hard": true,
	"eviction-max-pod-grace-period": true, "eviction-soft": true, "eviction-soft-grace-period": true,
	"hostname-override-source": true, "ids-per-pod": true, "image-gc-high-threshold-percent": true,
	"image-gc-low-threshold-percent": true, "kube-api-burst": true, "kube-api-qps": true, "kube-reserved": true,
	"log-level": true, "max-pods": true, "memory-manager-policy": true, "memory-manager-reserved-memory": true,
	"node-labels": true, "node-taints": true, "pod-pids-limit": true, "provider-id": true, "registry-burst": true,
	"registry-qps": true, "seccomp-default": true, "server-tls-bootstrap": true, "shutdown-grace-period": true,
	"shutdown-grace-period-for-critical-pods": true, "single-process-oom-kill": true, "standalone-mode": true,
	"static-pods": true, "system-reserved": true, "topology-manager-policy": true, "topology-manager-scope": true,
}

// bottlerocket is Bottlerocket's TOML: the class's [settings] (everything outside it is dropped,
// as are settings.kubernetes keys Bottlerocket does not know), with Capstan's keys written over
// them — the cluster, the node's labels (the class's kept unless Capstan sets the same key),
// its taints (the NodePool's only) and the class's kubelet settings. dropped names what was
// left out.
func bottlerocket(b Bootstrap) (out string, dropped []string, err error) {
	doc := map[string]any{}
	// Blank user data (a lone carriage return, say) is none, as Validate takes it.
	if strings.TrimSpace(b.Custom) == "" {
		b.Custom = ""
	}
	if err := toml.Unmarshal([]byte(b.Custom), &doc); err != nil {
		return "", nil, fmt.Errorf("bottlerocket user data is not TOML: %w", err)
	}
	for _, k := range slices.Sorted(maps.Keys(doc)) {
		if k != "settings" {
			dropped = append(dropped, k)
		}
	}
	settings, ok := doc["settings"].(map[string]any)
	if doc["settings"] != nil && !ok {
		return "", nil, fmt.Errorf("bottlerocket user data: settings is a %T, not a table", doc["settings"])
	}
	if settings == nil {
		settings = map[string]any{}
	}
	kube, ok := settings["kubernetes"].(map[string]any)
	if settings["kubernetes"] != nil && !ok {
		return "", nil, fmt.Errorf("bottlerocket user data: settings.kubernetes is a %T, not a table", settings["kubernetes"])
	}
	if kube == nil {
		kube = map[string]any{}
	}
	for _, k := range slices.Sorted(maps.Keys(kube)) {
		if !bottlerocketKubernetes[k] {
			dropped = append(dropped, "settings.kubernetes."+k)
			delete(kube, k)
		}
	}
	if _, ok := kube["node-taints"]; ok {
		dropped = append(dropped, "settings.kubernetes.node-taints (the NodePool's taints apply)")
	}
	kube["cluster-name"] = b.ClusterName
	kube["api-server"] = b.Endpoint
	if b.CABundle != "" {
		kube["cluster-certificate"] = b.CABundle
	}
	labels := map[string]any{}
	if l, ok := kube["node-labels"].(map[string]any); ok {
		labels = l
	}
	for k, v := range b.Labels {
		labels[k] = v
	}
	if len(labels) > 0 {
		kube["node-labels"] = labels
	}
	taints := map[string]any{}
	for _, t := range b.Taints {
		prev, _ := taints[t.Key].([]any)
		taints[t.Key] = append(prev, t.Value+":"+string(t.Effect))
	}
	kube["node-taints"] = taints
	if b.Kubelet != nil {
		bottlerocketKubeletSettings(kube, b.Kubelet)
	}
	settings["kubernetes"] = kube
	// Capstan's nodes join no Auto Scaling group: waiting for one would hold the kubelet.
	if as, ok := settings["autoscaling"].(map[string]any); ok {
		if _, ok := as["should-wait"]; ok {
			as["should-wait"] = false
		}
	}
	raw, err := toml.Marshal(map[string]any{"settings": settings})
	if err != nil {
		return "", nil, err
	}
	return string(raw), dropped, nil
}

// bottlerocketKubeletSettings writes the class's kubelet settings as Bottlerocket's
// settings.kubernetes keys.
func bottlerocketKubeletSettings(kube map[string]any, k *awsv1.KubeletConfiguration) {
	if k.MaxPods != nil {
		kube["max-pods"] = int64(*k.MaxPods)
	}
	if len(k.ClusterDNS) > 0 {
		kube["cluster-dns-ip"] = k.ClusterDNS[0]
	}
	setMap := func(name string, m map[string]string) {
		if len(m) > 0 {
			kube[name] = m
		}
	}
	setMap("kube-reserved", plain(k.KubeReserved))
	setMap("system-reserved", plain(k.SystemReserved))
	setMap("eviction-hard", plain(k.EvictionHard))
	setMap("eviction-soft", plain(k.EvictionSoft))
	if len(k.EvictionSoftGracePeriod) > 0 {
		grace := map[string]string{}
		for s, d := range k.EvictionSoftGracePeriod {
			grace[s] = d.Duration.String()
		}
		kube["eviction-soft-grace-period"] = grace
	}
	if k.EvictionMaxPodGracePeriod != nil {
		kube["eviction-max-pod-grace-period"] = int64(*k.EvictionMaxPodGracePeriod)
	}
	if k.ImageGCHighThresholdPercent != nil {
		kube["image-gc-high-threshold-percent"] = strconv.Itoa(int(*k.ImageGCHighThresholdPercent))
	}
	if k.ImageGCLowThresholdPercent != nil {
		kube["image-gc-low-threshold-percent"] = strconv.Itoa(int(*k.ImageGCLowThresholdPercent))
	}
	if k.CPUCFSQuota != nil {
		kube["cpu-cfs-quota-enforced"] = *k.CPUCFSQuota
	}
	for name, v := range extraConfig(k) {
		if setting := bottlerocketKubelet[name]; setting != "" {
			if f, ok := v.(float64); ok && f == float64(int64(f)) {
				v = int64(f) // Bottlerocket's integer settings refuse 4096.0
			}
			kube[setting] = v
		}
	}
}

// Dropped names what a family leaves out of the class's user data (Bottlerocket keys it would
// refuse) and which of spec.kubelet's unmodelled fields it cannot pass to the kubelet.
func Dropped(f Family, custom string, k *awsv1.KubeletConfiguration) []string {
	var dropped []string
	if f == Bottlerocket {
		_, dropped, _ = bottlerocket(Bootstrap{Custom: custom})
	}
	return append(dropped, unappliedKubelet(f, k)...)
}
