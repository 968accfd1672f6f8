package catalog_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	karpv1 "capstan.dev/capstan/api/karpenter/v1"
	"capstan.dev/capstan/internal/catalog"
)

// twoTypes is a catalog in the kwok provider's format.
const twoTypes = `[
 {"name": "c-2x-amd64-linux", "architecture": "amd64", "operatingSystems": ["linux"],
  "resources": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "20Gi", "pods": "32"},
  "offerings": [
   {"Price": 0.05, "Available": true, "Requirements": [
     {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]},
   {"Price": 0.02, "Available": true, "Requirements": [
     {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-b"]}]}]},
 {"name": "m5.large", "architecture": "arm64", "operatingSystems": ["linux", "windows"],
  "resources": {"cpu": "2", "memory": "8Gi"},
  "offerings": [{"Price": 0.096, "Available": false, "Requirements": [
     {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-a"]}]}]}
]`

func TestParseKWOK(t *testing.T) {
	its, err := catalog.ParseKWOK([]byte(twoTypes))
	if err != nil {
		t.Fatal(err)
	}
	if len(its) != 2 {
		t.Fatalf("%d types", len(its))
	}
	c := its[0]
	alloc := c.Allocatable()
	if q := alloc[corev1.ResourceCPU]; q.Cmp(resource.MustParse("1900m")) != 0 {
		t.Errorf("allocatable cpu %s, want capacity less 100m", q.String())
	}
	if q := alloc[corev1.ResourceMemory]; q.Cmp(resource.MustParse("4086Mi")) != 0 {
		t.Errorf("allocatable memory %s, want capacity less 10Mi", q.String())
	}
	if q := alloc[corev1.ResourcePods]; q.Value() != 32 {
		t.Errorf("pods %s, want the file's 32", q.String())
	}
	if len(c.Offerings) != 2 || c.Offerings[0].Price != 0.05 || c.Offerings[1].Zone != "test-zone-b" || c.Offerings[1].CapacityType != karpv1.CapacityTypeSpot {
		t.Errorf("offerings %+v", c.Offerings)
	}
	labels := c.Requirements.Labels()
	for k, want := range map[string]string{karpv1.InstanceTypeLabelKey: "c-2x-amd64-linux", karpv1.ArchLabelKey: "amd64", karpv1.OSLabelKey: "linux",
		catalog.KWOKInstanceFamilyLabelKey: "c", catalog.KWOKInstanceSizeLabelKey: "2", catalog.KWOKInstanceCPULabelKey: "2",
		catalog.KWOKInstanceMemoryLabelKey: "4Gi"} {
		if labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, labels[k], want)
		}
	}
	m := its[1]
	if q := m.Allocatable()[corev1.ResourcePods]; q.Value() != 110 {
		t.Errorf("pods %s, want the default 110", q.String())
	}
	ml := m.Requirements.Labels()
	if ml[catalog.KWOKInstanceSizeLabelKey] != "large" || ml[catalog.KWOKInstanceFamilyLabelKey] != "m5" {
		t.Errorf("AWS-style name labels %v", ml)
	}
	if os, _ := m.Requirements.Get(karpv1.OSLabelKey); !os.Allows("windows") || !os.Allows("linux") {
		t.Errorf("os requirement %s, want linux and windows", os.String())
	}
	// The kwok provider makes every offering available, whatever the file says.
	if !m.Offerings[0].Available {
		t.Error("an offering the file marks unavailable is unavailable; the kwok provider makes all available")
	}
}

func TestParseKWOKErrorsNameTheEntryAndField(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{}`, "JSON list"},
		{`[]`, "empty"},
		{`[{"name": "", "architecture": "amd64"}]`, `[0] "": name`},
		{`[{"name": "a", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"}}]`, `[0] "a": architecture`},
		{`[{"name": "a", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"memory": "1Gi"}}]`, `[0] "a": resources.cpu`},
		{`[{"name": "a", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"}}]`, `[0] "a": offerings: must list`},
		{`[{"name": "a", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"},
		   "offerings": [{"Price": -1, "Requirements": []}]}]`, `[0] "a": offerings[0].Price: -1`},
		{`[{"name": "a", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"},
		   "offerings": [{"Price": 1, "Requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]}]}]}]`,
			`offerings[0].Requirements: no topology.kubernetes.io/zone`},
		{`[{"name": "a", "architecture": "amd64", "operatingSystems": ["linux"], "resources": {"cpu": "1", "memory": "1Gi"},
		   "offerings": [{"Price": 1, "Requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["cheap"]}]}]}]`,
			`"cheap" is not on-demand, spot or reserved`},
	} {
		_, err := catalog.ParseKWOK([]byte(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.json, err, tc.want)
		}
	}
	dup := strings.Replace(twoTypes, `"m5.large"`, `"c-2x-amd64-linux"`, 1)
	if _, err := catalog.ParseKWOK([]byte(dup)); err == nil || !strings.Contains(err.Error(), `[1] "c-2x-amd64-linux": name: another entry`) {
		t.Errorf("duplicate names: %v", err)
	}
}
