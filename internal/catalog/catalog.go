// Package catalog holds public facts about EC2 instance types — labels, capacity, allocatable
// resources and us-east-1 on-demand prices — embedded at build time, and turns them into
// instance types with offerings in a set of zones. The simulated cloud, the fake EC2 endpoint and
// the benchmarks use it.
package catalog

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	awsv1 "capstan.dev/capstan/api/aws/v1"
	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
)

//go:embed data/ec2-instance-types.jsonl.gz
var ec2Data []byte

// Entry is one instance type of the catalog.
type Entry struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels"`
	Allocatable map[string]string `json:"allocatable"`
	// OnDemandPriceUSD maps a region to the hourly on-demand price.
	OnDemandPriceUSD map[string]float64 `json:"onDemandPriceUSD"`
}

// Region is the region whose prices the catalog carries.
const Region = "us-east-1"

// Load decodes the embedded catalog, sorted by name.
func Load() ([]Entry, error) {
	zr, err := gzip.NewReader(bytes.NewReader(ec2Data))
	if err != nil {
		return nil, fmt.Errorf("opening catalog: %w", err)
	}
	return Decode(zr)
}

// Decode reads a catalog, one JSON Entry per line (the embedded catalog's source format), sorted
// by name; an entry that does not decode, or has no name, is an error naming its line.
func Decode(r io.Reader) ([]Entry, error) {
	var entries []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("decoding catalog line %d: %w", line, err)
		}
		if e.Name == "" {
			return nil, fmt.Errorf("catalog line %d: no name", line)
		}
		entries = append(entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading catalog: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return entries, nil
}

// Options shape the offerings of the instance types.
type Options struct {
	// Zones are the zones every type is offered in.
	Zones []string
	// Spot adds spot offerings.
	Spot bool
	// SpotFraction returns the spot price as a fraction of on-demand for a type and zone; nil
	// means StableSpotFraction(0.30, 0.45).
	SpotFraction func(instanceType, zone string) float64
	// MaxPods, when set, replaces each type's pod capacity (the kubelet's maxPods).
	MaxPods *int32
	// PodsPerCore, when set and not 0, caps each type's pods at this many per vCPU.
	PodsPerCore *int32
}

// kubeReservedPerPod is the memory the kubelet reserves per pod of capacity, as the EKS AMIs
// compute kube-reserved (11 MiB per pod plus a base), so pod capacity and allocatable memory move
// together.
const kubeReservedPerPod = 11 << 20

// podCapacity applies maxPods and podsPerCore to a type's default pod capacity.
func podCapacity(defaultPods, vcpus int64, maxPods, podsPerCore *int32) int64 {
	pods := defaultPods
	if maxPods != nil {
		pods = int64(*maxPods)
	}
	if podsPerCore != nil && *podsPerCore > 0 {
		pods = min(pods, int64(*podsPerCore)*vcpus)
	}
	return pods
}

// StableSpotFraction returns a function giving each type and zone a fixed fraction in [lo, hi],
// derived from a hash of their names, so prices are stable across runs.
func StableSpotFraction(lo, hi float64) func(string, string) float64 {
	return func(it, zone string) float64 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(it + "/" + zone))
		return lo + (hi-lo)*float64(h.Sum32()%1000)/999
	}
}

// InstanceType converts an entry; it returns nil when the entry has no price in Region.
func (e Entry) InstanceType(opts Options) (*cloudprovider.InstanceType, error) {
	price, ok := e.OnDemandPriceUSD[Region]
	if !ok {
		return nil, nil
	}
	alloc := corev1.ResourceList{}
	for k, v := range e.Allocatable {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("instance type %s: allocatable %s %q: %w", e.Name, k, v, err)
		}
		alloc[corev1.ResourceName(k)] = q
	}
	capacity := alloc.DeepCopy()
	overhead := corev1.ResourceList{}
	// The catalog lists allocatable; capacity comes from the CPU and memory labels.
	if cpu, err := strconv.ParseInt(e.Labels[awsv1.LabelInstanceCPU], 10, 64); err == nil {
		capacity[corev1.ResourceCPU] = *resource.NewQuantity(cpu, resource.DecimalSI)
	}
	if mib, err := strconv.ParseInt(e.Labels[awsv1.LabelInstanceMemory], 10, 64); err == nil {
		capacity[corev1.ResourceMemory] = *resource.NewQuantity(mib*1024*1024, resource.BinarySI)
	}
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		o := capacity[name].DeepCopy()
		o.Sub(alloc[name])
		overhead[name] = o
	}
	if opts.MaxPods != nil || opts.PodsPerCore != nil {
		defaultPods, vcpus := alloc.Pods().Value(), capacity.Cpu().Value()
		pods := podCapacity(defaultPods, vcpus, opts.MaxPods, opts.PodsPerCore)
		capacity[corev1.ResourcePods] = *resource.NewQuantity(pods, resource.DecimalSI)
		mem := overhead[corev1.ResourceMemory]
		mem.Add(*resource.NewQuantity((pods-defaultPods)*kubeReservedPerPod, resource.BinarySI))
		if mem.Sign() < 0 {
			mem = resource.Quantity{}
		}
		overhead[corev1.ResourceMemory] = mem
	}
	frac := opts.SpotFraction
	if frac == nil {
		frac = StableSpotFraction(0.30, 0.45)
	}
	var offerings []cloudprovider.Offering
	for _, z := range opts.Zones {
		offerings = append(offerings, cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeOnDemand, Price: price, Available: true})
		if opts.Spot {
			offerings = append(offerings, cloudprovider.Offering{Zone: z, CapacityType: karpv1.CapacityTypeSpot, Price: price * frac(e.Name, z), Available: true})
		}
	}
	return cloudprovider.NewInstanceType(e.Name, e.Labels, capacity, overhead, offerings), nil
}

// InstanceTypes converts every priced entry.
func InstanceTypes(entries []Entry, opts Options) ([]*cloudprovider.InstanceType, error) {
	var out []*cloudprovider.InstanceType
	for _, e := range entries {
		it, err := e.InstanceType(opts)
		if err != nil {
			return nil, err
		}
		if it != nil {
			out = append(out, it)
		}
	}
	return out, nil
}
