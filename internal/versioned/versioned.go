// Package versioned reads Capstan's own file formats (recordings, traces): YAML or JSON with an
// apiVersion and a kind, refusing other kinds, other versions and unknown fields with the field or
// value named.
package versioned

import (
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// Read decodes in into v after checking its apiVersion and kind; what names the file's kind of
// content in errors ("recording", "trace").
func Read(in io.Reader, apiVersion, kind, what string, v any) error {
	b, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(b, &head); err != nil {
		return fmt.Errorf("not a %s: %w", what, err)
	}
	if head.Kind != kind {
		return fmt.Errorf("kind %q: not a %s", head.Kind, kind)
	}
	if head.APIVersion != apiVersion {
		return fmt.Errorf("apiVersion %q: this version reads %s only; use the kubectl-capstan that wrote it, or a newer one", head.APIVersion, apiVersion)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		return fmt.Errorf("reading the %s: %w", what, err)
	}
	return nil
}
