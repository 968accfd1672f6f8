package apivalidation

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"capstan.dev/capstan/internal/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) { testenv.Main(m, &env) }

// Base manifests that are valid; cases patch them.
const (
	baseNodePool = `
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: base}
spec:
  template:
    spec:
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
`
	baseNodeClaim = `
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata: {name: base}
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - {key: kubernetes.io/arch, operator: In, values: [amd64]}
`
	baseEC2NodeClass = `
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: base}
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: prod-east}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: prod-east}}]
`
	baseNodeOverlay = `
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata: {name: base}
spec: {requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [spot]}]}
`
	baseSimNodeClass = `
apiVersion: capstan.dev/v1alpha1
kind: SimNodeClass
metadata: {name: base}
spec: {}
`
	baseCapacityBuffer = `
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata: {name: base, namespace: default}
spec: {podTemplateRef: {name: chunk}, replicas: 2}
`
)

// object returns base with the YAML merge patch (RFC 7386: null deletes) applied, named name.
func object(t *testing.T, base, patch, name string) *unstructured.Unstructured {
	t.Helper()
	var b, p map[string]any
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatalf("decoding base: %v", err)
	}
	if patch != "" {
		if err := yaml.Unmarshal([]byte(patch), &p); err != nil {
			t.Fatalf("decoding patch %q: %v", patch, err)
		}
	}
	u := &unstructured.Unstructured{Object: mergePatch(b, p)}
	u.SetName(name)
	return u
}

func mergePatch(target, patch map[string]any) map[string]any {
	for k, pv := range patch {
		if pv == nil {
			delete(target, k)
			continue
		}
		pm, pIsMap := pv.(map[string]any)
		tm, tIsMap := target[k].(map[string]any)
		if pIsMap && tIsMap {
			target[k] = mergePatch(tm, pm)
		} else {
			target[k] = pv
		}
	}
	return target
}

// uniqueName makes a DNS-1123 name from a test name.
func uniqueName(t *testing.T) string {
	t.Helper()
	n := strings.ToLower(t.Name())
	var sb strings.Builder
	for _, r := range n {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			sb.WriteRune(r)
		} else {
			sb.WriteRune('-')
		}
	}
	s := strings.Trim(sb.String(), "-")
	if len(s) > 50 {
		s = fmt.Sprintf("%s-%x", s[:40], hash(s))
	}
	return s
}

func hash(s string) uint32 {
	var h uint32 = 2166136261
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func splitPath(p string) []string { return strings.Split(p, ".") }

// equalJSON compares decoded JSON values, treating all numbers as int64 or float64 alike.
func equalJSON(a, b any) bool {
	ab, err1 := yaml.Marshal(a)
	bb, err2 := yaml.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ab, bb)
}

func clientKey(u *unstructured.Unstructured) client.ObjectKey { return client.ObjectKeyFromObject(u) }
