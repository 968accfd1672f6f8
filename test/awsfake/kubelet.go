package awsfake

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubelet plays the instances' kubelets: a running instance registers its Node as nodeadm and
// the kubelet would from its user data — name from its private DNS name, labels and taints from
// the kubelet flags, capacity from the machine, allocatable less the NodeConfig's reservations.
type Kubelet struct {
	Server *Server
	Client client.Client
	// BootDelay is how long an instance stays pending (default 1 s).
	BootDelay time.Duration
	// Interval is how often instances are looked at (default 200 ms).
	Interval time.Duration
	// HypervisorMemoryPercent is the share of memory the machine does not show the OS
	// (default 0.075).
	HypervisorMemoryPercent float64
	// Kwok marks the Nodes for kwok, which then runs their pods (local clusters).
	Kwok bool

	// checked is when each instance's Node was last found: a registered kubelet looks again
	// only every few seconds (it registers again if its Node was deleted while it runs).
	checked map[string]time.Time
}

// recheck is how often a registered instance's Node is looked for again.
const recheck = 5 * time.Second

// Start registers Nodes until ctx ends.
func (k *Kubelet) Start(ctx context.Context) error {
	interval := k.Interval
	if interval == 0 {
		interval = 200 * time.Millisecond
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			_ = k.Sync(ctx)
		}
	}
}

// Sync advances instance states and registers every running instance's Node.
func (k *Kubelet) Sync(ctx context.Context) error {
	boot := k.BootDelay
	if boot == 0 {
		boot = time.Second
	}
	k.Server.Advance(boot)
	if k.checked == nil {
		k.checked = map[string]time.Time{}
	}
	var errs []error
	for _, inst := range k.Server.Instances() {
		if inst.State != "running" {
			delete(k.checked, inst.ID)
			continue
		}
		if t, ok := k.checked[inst.ID]; ok && time.Since(t) < recheck {
			continue
		}
		if err := k.register(ctx, inst); err != nil {
			errs = append(errs, fmt.Errorf("registering %s: %w", inst.ID, err))
			continue
		}
		k.checked[inst.ID] = time.Now()
	}
	return errors.Join(errs...)
}

func (k *Kubelet) register(ctx context.Context, inst Instance) error {
	node := &corev1.Node{}
	if err := k.Client.Get(ctx, client.ObjectKey{Name: inst.PrivateDNS}, node); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	family := k.Server.imageFamily(inst.ImageID)
	boot, err := ReadBoot(family, inst.Template["UserData"])
	if err != nil {
		return err
	}
	// A node told another cluster, or no API server, never joins this one.
	if boot.Cluster != k.Server.cluster || boot.Endpoint == "" {
		return fmt.Errorf("user data joins cluster %q at %q, not %q", boot.Cluster, boot.Endpoint, k.Server.cluster)
	}
	labels, taints, config := boot.Labels, boot.Taints, boot.Config
	if labels == nil {
		labels = map[string]string{}
	}
	it := k.Server.instanceType(inst.Type)
	if it == nil {
		return fmt.Errorf("unknown instance type %s", inst.Type)
	}
	arch := it.arch
	labels[corev1.LabelHostname] = inst.PrivateDNS
	labels[corev1.LabelInstanceTypeStable] = inst.Type
	labels[corev1.LabelArchStable] = arch
	os := "linux"
	if year, ok := strings.CutPrefix(family, "windows"); ok {
		os = "windows"
		labels[corev1.LabelWindowsBuild] = map[string]string{"2019": "10.0.17763", "2022": "10.0.20348", "2025": "10.0.26100"}[year]
	}
	labels[corev1.LabelOSStable] = os
	labels[corev1.LabelTopologyZone] = inst.Zone
	labels[corev1.LabelTopologyRegion] = k.Server.region
	capacity, allocatable, err := k.resources(it, inst, family, config)
	if err != nil {
		return err
	}
	now := metav1.Now()
	node = &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: inst.PrivateDNS, Labels: labels},
		Spec:       corev1.NodeSpec{ProviderID: inst.ProviderID(), Taints: taints},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: allocatable,
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
				LastHeartbeatTime: now, LastTransitionTime: now}},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", Architecture: arch, OperatingSystem: os}},
	}
	if k.Kwok {
		node.Annotations = map[string]string{"kwok.x-k8s.io/node": "fake"}
	}
	if err := k.Client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// imageFamily is how an image boots ("" for an unknown image or one without a family: AL2023).
func (s *Server) imageFamily(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if im := s.images[id]; im != nil {
		return im.Family
	}
	return ""
}

func (s *Server) instanceType(name string) *instanceType {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.types {
		if it.name == name {
			return it
		}
	}
	return nil
}

// cpuReservedBrackets is the kube-reserved CPU the EKS AMIs' bootstrap (nodeadm) gives a machine,
// as its documentation states it: a share of each core in turn, by bracket of cores. It is
// written here as brackets, independently of the provider's own computation, so that a test
// comparing the Node with the provider's expectation can disagree with it.
var cpuReservedBrackets = []struct {
	upTo         int64   // the bracket's last core (0: every core after the previous bracket)
	milliPerCore float64 // of each core in the bracket: 6%, 1%, 0.5%, 0.25% of 1000m
}{{1, 60}, {2, 10}, {4, 5}, {0, 2.5}}

// nodeadmKubeReservedCPU is the kube-reserved CPU, in millicores, of a machine of vcpus cores.
func nodeadmKubeReservedCPU(vcpus int64) int64 {
	milli, from := 0.0, int64(0)
	for _, b := range cpuReservedBrackets {
		to := vcpus
		if b.upTo > 0 {
			to = min(vcpus, b.upTo)
		}
		if to > from {
			milli += float64(to-from) * b.milliPerCore
			from = to
		}
	}
	return int64(math.Round(milli))
}

// resources are the Node's capacity and allocatable as nodeadm and the kubelet set them: the
// machine's resources, maxPods from its ENIs unless configured, kube-reserved from EKS's formulas
// unless configured, system-reserved and hard eviction thresholds as configured (100Mi memory,
// 10% of the root volume by default).
func (k *Kubelet) resources(it *instanceType, inst Instance, family string, config map[string]any) (corev1.ResourceList, corev1.ResourceList, error) {
	pct := k.HypervisorMemoryPercent
	if pct == 0 {
		pct = 0.075
	}
	// A Graviton's kernel keeps 64 MiB for its contiguous memory allocator (aws#3937).
	mib := it.memMiB
	if it.arch == "arm64" {
		mib -= 64
	}
	mem := mib - int64(math.Ceil(float64(mib)*pct))
	pods := it.enis*(it.ipsPerENI-1) + 2
	if v, ok := config["maxPods"].(float64); ok {
		pods = int64(v)
	}
	if v, ok := config["podsPerCore"].(float64); ok && v > 0 {
		pods = min(pods, int64(v)*it.vcpus)
	}
	// The kubelet's storage is the root volume, on Bottlerocket its data volume (/dev/xvdb).
	disk, mapping := int64(20), "1"
	for i := 1; inst.Template[fmt.Sprintf("BlockDeviceMapping.%d.DeviceName", i)] != ""; i++ {
		if family == "bottlerocket" && inst.Template[fmt.Sprintf("BlockDeviceMapping.%d.DeviceName", i)] == "/dev/xvdb" {
			mapping = strconv.Itoa(i)
		}
	}
	if v, err := strconv.ParseInt(inst.Template["BlockDeviceMapping."+mapping+".Ebs.VolumeSize"], 10, 64); err == nil {
		disk = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(it.vcpus, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem<<20, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(pods, resource.DecimalSI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(disk<<30, resource.BinarySI),
	}
	if it.gpuCount > 0 && it.gpuManufacturer == "nvidia" {
		capacity["nvidia.com/gpu"] = *resource.NewQuantity(it.gpuCount, resource.DecimalSI)
	}
	if it.gpuCount > 0 && it.gpuManufacturer == "amd" {
		capacity["amd.com/gpu"] = *resource.NewQuantity(it.gpuCount, resource.DecimalSI)
	}
	if it.neuronCount > 0 {
		capacity["aws.amazon.com/neuron"] = *resource.NewQuantity(it.neuronCount, resource.DecimalSI)
		capacity["aws.amazon.com/neuroncore"] = *resource.NewQuantity(it.neuronCount*it.neuronCores, resource.DecimalSI)
	}
	if it.efa > 0 {
		capacity["vpc.amazonaws.com/efa"] = *resource.NewQuantity(it.efa, resource.DecimalSI)
	}
	reserved := map[string]string{
		"cpu":               fmt.Sprintf("%dm", nodeadmKubeReservedCPU(it.vcpus)),
		"memory":            fmt.Sprintf("%dMi", 11*pods+255),
		"ephemeral-storage": "1Gi",
	}
	if m, ok := config["kubeReserved"].(map[string]any); ok {
		for name, v := range m {
			reserved[name] = fmt.Sprint(v)
		}
	}
	if m, ok := config["systemReserved"].(map[string]any); ok {
		for name, v := range m {
			if q, err := resource.ParseQuantity(fmt.Sprint(v)); err == nil && reserved[name] != "" {
				r := resource.MustParse(reserved[name])
				r.Add(q)
				reserved[name] = r.String()
			} else {
				reserved[name] = fmt.Sprint(v)
			}
		}
	}
	alloc := capacity.DeepCopy()
	sub := func(name corev1.ResourceName, q resource.Quantity) {
		a := alloc[name]
		a.Sub(q)
		alloc[name] = a
	}
	for name, v := range reserved {
		if name == "pid" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, nil, fmt.Errorf("reserved %s: %w", name, err)
		}
		sub(corev1.ResourceName(name), q)
	}
	eviction := map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"}
	if m, ok := config["evictionHard"].(map[string]any); ok {
		for signal, v := range m {
			eviction[signal] = fmt.Sprint(v)
		}
	}
	for signal, res := range map[string]corev1.ResourceName{"memory.available": corev1.ResourceMemory, "nodefs.available": corev1.ResourceEphemeralStorage} {
		v, ok := eviction[signal]
		if !ok {
			continue
		}
		if p, ok := strings.CutSuffix(v, "%"); ok {
			f, _ := strconv.ParseFloat(p, 64)
			total := capacity[res]
			sub(res, *resource.NewQuantity(int64(math.Ceil(float64(total.Value())*f/100)), resource.BinarySI))
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, nil, fmt.Errorf("evictionHard.%s: %w", signal, err)
		}
		sub(res, q)
	}
	return capacity, alloc, nil
}
