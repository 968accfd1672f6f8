// Command crd-schema adds to the generated CRDs (config/crd) the string bounds and patterns that
// controller-gen's markers cannot place: on fields of a type the API borrows from Kubernetes
// (corev1.Taint's key and value, in NodePool and NodeClaim taints and startup taints) and on map
// values (a NodePool template's label values). They are the checks the API server makes of a
// Node's taints and labels, which the kubelet registers with and which reach a machine's boot
// script. They cannot be CEL rules: a regular expression over a string without maxLength, in a
// list of 100, costs 37.7 times the API server's budget for one rule.
//
// It rewrites each file as controller-gen writes it ("---" and sigs.k8s.io/yaml of the CRD as
// JSON), so its only changes are the added keys, and fails when a path it expects is missing.
//
//	go run ./hack/crd-schema config/crd
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// Patterns of Kubernetes' validation (k8s.io/apimachinery/pkg/util/validation): a qualified
// name, with its optional prefix a lower-case DNS subdomain, and a label value.
const (
	qualifiedName = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$`
	labelValue    = `^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
)

// constraint is what one schema gains.
type constraint map[string]any

// A taint's key is a qualified name; its value, like a label's, is a label value.
var (
	taintKey = constraint{"minLength": 1, "maxLength": 316, "pattern": qualifiedName}
	labelVal = constraint{"maxLength": 63, "pattern": labelValue}
)

// schemaEdit is one schema (a path of keys from a version's openAPIV3Schema) and what it gains.
type schemaEdit struct {
	path []string
	add  constraint
}

// edits are the schema edits of each CRD file.
var edits = map[string][]schemaEdit{
	"karpenter.sh_nodepools.yaml": {
		{taint("spec", "template", "spec", "taints", "key"), taintKey},
		{taint("spec", "template", "spec", "taints", "value"), labelVal},
		{taint("spec", "template", "spec", "startupTaints", "key"), taintKey},
		{taint("spec", "template", "spec", "startupTaints", "value"), labelVal},
		{append(props("spec", "template", "metadata", "labels"), "additionalProperties"), labelVal},
	},
	"karpenter.sh_nodeclaims.yaml": {
		{taint("spec", "taints", "key"), taintKey},
		{taint("spec", "taints", "value"), labelVal},
		{taint("spec", "startupTaints", "key"), taintKey},
		{taint("spec", "startupTaints", "value"), labelVal},
	},
}

// props is the schema path of nested properties.
func props(names ...string) []string {
	var p []string
	for _, n := range names {
		p = append(p, "properties", n)
	}
	return p
}

// taint is the schema path of a field of the items of a list of taints: list names, then field.
func taint(names ...string) []string {
	list, field := names[:len(names)-1], names[len(names)-1]
	return append(append(props(list...), "items"), props(field)...)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: crd-schema CRD_DIR")
		os.Exit(2)
	}
	for file, es := range edits {
		path := filepath.Join(os.Args[1], file)
		if err := edit(path, es); err != nil {
			fmt.Fprintf(os.Stderr, "crd-schema: %s: %v\n", path, err)
			os.Exit(1)
		}
	}
}

func edit(path string, es []schemaEdit) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	j, err := yaml.YAMLToJSON(bytes.TrimPrefix(raw, []byte("---\n")))
	if err != nil {
		return err
	}
	var crd map[string]any
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber() // as controller-gen decodes, so numbers come out as they went in
	if err := d.Decode(&crd); err != nil {
		return err
	}
	versions, _ := lookup(crd, "spec", "versions").([]any)
	if len(versions) == 0 {
		return fmt.Errorf("no spec.versions")
	}
	for _, v := range versions {
		root := lookup(v, "schema", "openAPIV3Schema")
		for _, e := range es {
			s, ok := lookup(root, e.path...).(map[string]any)
			if !ok {
				return fmt.Errorf("version %v: no schema at %s", lookup(v, "name"), strings.Join(e.path, "."))
			}
			for k, val := range e.add {
				s[k] = val
			}
		}
	}
	out, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	return os.WriteFile(path, append([]byte("---\n"), out...), 0o644)
}

// lookup follows keys through nested maps; nil when one is missing.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}
