package v1

import (
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// kubeletTyped is KubeletConfiguration without its JSON methods.
type kubeletTyped KubeletConfiguration

// MarshalJSON writes the typed fields and Extra side by side.
func (k KubeletConfiguration) MarshalJSON() ([]byte, error) {
	typed, err := json.Marshal(kubeletTyped(k))
	if err != nil || len(k.Extra) == 0 {
		return typed, err
	}
	all := map[string]json.RawMessage{}
	if err := json.Unmarshal(typed, &all); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(k.Extra)) {
		if _, ok := all[name]; ok {
			continue // a typed field wins
		}
		raw := k.Extra[name].Raw
		if raw == nil {
			raw = []byte("null")
		}
		all[name] = raw
	}
	return json.Marshal(all)
}

// UnmarshalJSON reads the typed fields, and every other field into Extra.
func (k *KubeletConfiguration) UnmarshalJSON(b []byte) error {
	var typed kubeletTyped
	if err := json.Unmarshal(b, &typed); err != nil {
		return err
	}
	all := map[string]json.RawMessage{}
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	*k = KubeletConfiguration(typed)
	k.Extra = nil
	for name, raw := range all {
		if typedFields[name] {
			continue
		}
		if k.Extra == nil {
			k.Extra = map[string]runtime.RawExtension{}
		}
		k.Extra[name] = runtime.RawExtension{Raw: raw}
	}
	return nil
}

// typedFields are the JSON names of KubeletConfiguration's typed fields.
var typedFields = func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeFor[kubeletTyped]()
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out[name] = true
		}
	}
	return out
}()
