package catalog

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/cloudprovider"
	"capstan.dev/capstan/internal/requirements"
)

// Labels of Karpenter's kwok provider that its instance types carry, so that NodePools written
// for that provider select the same types here.
const (
	KWOKInstanceSizeLabelKey   = "karpenter.kwok.sh/instance-size"
	KWOKInstanceFamilyLabelKey = "karpenter.kwok.sh/instance-family"
	KWOKInstanceCPULabelKey    = "karpenter.kwok.sh/instance-cpu"
	KWOKInstanceMemoryLabelKey = "karpenter.kwok.sh/instance-memory"
)

// KWOKLabels are the kwok provider's instance-type label keys.
var KWOKLabels = []string{KWOKInstanceSizeLabelKey, KWOKInstanceFamilyLabelKey, KWOKInstanceCPULabelKey, KWOKInstanceMemoryLabelKey}

// kwokOverhead is the kwok provider's fixed reservation on every type.
var kwokOverhead = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("10Mi")}

// kwokEntry is one element of a kwok provider instance_types.json.
type kwokEntry struct {
	Name             string              `json:"name"`
	Offerings        []kwokOffering      `json:"offerings"`
	Architecture     string              `json:"architecture"`
	OperatingSystems []string            `json:"operatingSystems"`
	Resources        corev1.ResourceList `json:"resources"`
}

type kwokOffering struct {
	Price        *float64                         `json:"Price"`
	Available    *bool                            `json:"Available"`
	Requirements []corev1.NodeSelectorRequirement `json:"Requirements"`
}

var (
	awsName     = regexp.MustCompile(`^[a-z0-9]+\.([a-z0-9]+)$`)
	familyDelim = regexp.MustCompile(`[.-]`)
)

// ParseKWOK reads instance types in the format of Karpenter's kwok provider
// (instance_types.json: name, architecture, operatingSystems, resources, and offerings with
// Price, Available and Requirements on zone and capacity type), with that provider's overhead
// model: allocatable is capacity less 100m CPU and 10Mi memory, pods default to 110. Every
// offering is priced and placed as the file says. An error names the entry and the field.
func ParseKWOK(data []byte) ([]*cloudprovider.InstanceType, error) {
	var entries []kwokEntry
	if err := json.Unmarshal(data, &entries); err != nil {
		return nil, fmt.Errorf("reading the instance types as a JSON list in the kwok provider's format: %w", err)
	}
	if len(entries) == 0 {
		return nil, errors.New("the instance type list is empty")
	}
	seen := map[string]bool{}
	out := make([]*cloudprovider.InstanceType, 0, len(entries))
	for i, e := range entries {
		where := fmt.Sprintf("instance type [%d] %q", i, e.Name)
		it, err := e.instanceType()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("%s: name: another entry has the same name", where)
		}
		seen[e.Name] = true
		out = append(out, it)
	}
	return out, nil
}

func (e kwokEntry) instanceType() (*cloudprovider.InstanceType, error) {
	if e.Name == "" {
		return nil, errors.New("name: must not be empty")
	}
	if e.Architecture == "" {
		return nil, errors.New("architecture: must not be empty")
	}
	if len(e.OperatingSystems) == 0 || slices.Contains(e.OperatingSystems, "") {
		return nil, errors.New("operatingSystems: must list at least one, none empty")
	}
	capacity := corev1.ResourceList{corev1.ResourcePods: resource.MustParse("110")}
	for n, q := range e.Resources {
		if q.Sign() < 0 {
			return nil, fmt.Errorf("resources.%s: %s is negative", n, q.String())
		}
		capacity[n] = q
	}
	cpu, mem := capacity[corev1.ResourceCPU], capacity[corev1.ResourceMemory]
	if cpu.Sign() <= 0 {
		return nil, errors.New("resources.cpu: must be positive")
	}
	if mem.Sign() <= 0 {
		return nil, errors.New("resources.memory: must be positive")
	}
	if len(e.Offerings) == 0 {
		return nil, errors.New("offerings: must list at least one")
	}
	var offerings []cloudprovider.Offering
	for j, o := range e.Offerings {
		off, err := o.offering(fmt.Sprintf("offerings[%d]", j))
		if err != nil {
			return nil, err
		}
		offerings = append(offerings, off...)
	}
	labels := map[string]string{
		karpv1.ArchLabelKey:        e.Architecture,
		KWOKInstanceSizeLabelKey:   kwokSize(e.Name, cpu.String()),
		KWOKInstanceFamilyLabelKey: kwokFamily(e.Name),
		KWOKInstanceCPULabelKey:    cpu.String(),
		KWOKInstanceMemoryLabelKey: mem.String(),
	}
	it := cloudprovider.NewInstanceType(e.Name, labels, capacity, kwokOverhead.DeepCopy(), offerings)
	// A type for several systems allows each of them.
	it.Requirements.Add(requirements.MustNew(karpv1.OSLabelKey, requirements.In, e.OperatingSystems...))
	return it, nil
}

// offering reads one kwok offering: its requirements must name the zone and capacity type (In,
// each value one offering).
func (o kwokOffering) offering(at string) ([]cloudprovider.Offering, error) {
	if o.Price == nil {
		return nil, fmt.Errorf("%s.Price: missing", at)
	}
	if *o.Price < 0 || math.IsNaN(*o.Price) || math.IsInf(*o.Price, 0) {
		return nil, fmt.Errorf("%s.Price: %v is not a price", at, *o.Price)
	}
	var zones, cts []string
	for k, r := range o.Requirements {
		if r.Operator != corev1.NodeSelectorOpIn || len(r.Values) == 0 {
			return nil, fmt.Errorf("%s.Requirements[%d] (%s): operator must be In with at least one value", at, k, r.Key)
		}
		switch r.Key {
		case corev1.LabelTopologyZone:
			zones = append(zones, r.Values...)
		case karpv1.CapacityTypeLabelKey:
			for _, v := range r.Values {
				if !slices.Contains([]string{karpv1.CapacityTypeOnDemand, karpv1.CapacityTypeSpot, karpv1.CapacityTypeReserved}, v) {
					return nil, fmt.Errorf("%s.Requirements[%d] (%s): %q is not on-demand, spot or reserved", at, k, r.Key, v)
				}
			}
			cts = append(cts, r.Values...)
		default:
			return nil, fmt.Errorf("%s.Requirements[%d]: key %q is not supported (only %s and %s)", at, k, r.Key, corev1.LabelTopologyZone, karpv1.CapacityTypeLabelKey)
		}
	}
	if len(zones) == 0 {
		return nil, fmt.Errorf("%s.Requirements: no %s", at, corev1.LabelTopologyZone)
	}
	if len(cts) == 0 {
		return nil, fmt.Errorf("%s.Requirements: no %s", at, karpv1.CapacityTypeLabelKey)
	}
	// The kwok provider makes every offering of the file available.
	var out []cloudprovider.Offering
	for _, z := range zones {
		for _, ct := range cts {
			out = append(out, cloudprovider.Offering{Zone: z, CapacityType: ct, Price: *o.Price, Available: true})
		}
	}
	return out, nil
}

// kwokSize is the size part of an AWS-style name (m5.large → large), else the CPU count, as the
// kwok provider labels it.
func kwokSize(name, cpu string) string {
	if m := awsName.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return cpu
}

// kwokFamily is the name up to its first "." or "-", else its first letter.
func kwokFamily(name string) string {
	parts := familyDelim.Split(name, 2)
	if len(parts) < 2 {
		return name[:1]
	}
	return parts[0]
}
