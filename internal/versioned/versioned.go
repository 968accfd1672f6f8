// Package versioned reads Capstan's own file formats (recordings, traces): YAML or JSON with an
// apiVersion and a kind, refusing other kinds, other versions and unknown fields with the field or
// value named. JSON is read as JSON (sigs.k8s.io/json, case-sensitive and strict, as the API
// server reads it); only YAML goes through the YAML-to-JSON conversion.
package versioned

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// head is what Read checks before decoding the rest.
type head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// Read decodes in into v after checking its apiVersion and kind; what names the file's kind of
// content in errors ("recording", "trace").
func Read(in io.Reader, apiVersion, kind, what string, v any) error {
	b, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	isJSON := bytes.HasPrefix(bytes.TrimLeft(b, " \t\r\n"), []byte("{"))
	var h head
	if isJSON {
		// The head alone: every other value is skipped, not built.
		err = kjson.UnmarshalCaseSensitivePreserveInts(b, &h)
	} else {
		err = yaml.Unmarshal(b, &h)
	}
	if err != nil {
		return fmt.Errorf("not a %s: %w", what, err)
	}
	if h.Kind != kind {
		return fmt.Errorf("kind %q: not a %s", h.Kind, kind)
	}
	if h.APIVersion != apiVersion {
		return fmt.Errorf("apiVersion %q: this version reads %s only; use the kubectl-capstan that wrote it, or a newer one", h.APIVersion, apiVersion)
	}
	if !isJSON {
		if err := yaml.UnmarshalStrict(b, v); err != nil {
			return fmt.Errorf("reading the %s: %w", what, err)
		}
		return nil
	}
	strict, err := kjson.UnmarshalStrict(b, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("reading the %s: %w", what, err)
	}
	if len(strict) > 0 {
		return fmt.Errorf("reading the %s: %w", what, errors.Join(strict...))
	}
	return nil
}
