package v1

import (
	"encoding/json"
	"fmt"
	"time"
)

// Never is the value of a NillableDuration that disables the behaviour it times.
const Never = "Never"

// NillableDuration is a duration that may also be "Never". In JSON it is a Go duration string
// ("720h", "30m", "90s") or "Never". Its zero value is "not set": it is omitted on the wire (fields
// of this type are tagged omitzero), so the API server applies the field's default.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:Pattern=`^(([0-9]+(s|m|h))+|Never)$`
// +kubebuilder:validation:XValidation:rule="self == 'Never' || duration(self) <= duration('2562047h')",message="must be Never or a duration of at most 2562047h (about 292 years, the longest Go reads)"
type NillableDuration struct {
	// Duration is the duration, or nil when the value is Never or not set.
	Duration *time.Duration `json:"-"`
	never    bool
}

// NewDuration returns a NillableDuration of d.
func NewDuration(d time.Duration) NillableDuration { return NillableDuration{Duration: &d} }

// NeverDuration returns the NillableDuration "Never".
func NeverDuration() NillableDuration { return NillableDuration{never: true} }

// MustParseNillableDuration parses s ("Never" or a duration) and panics if it is neither. It is
// for constants and tests.
func MustParseNillableDuration(s string) NillableDuration {
	var d NillableDuration
	if err := d.UnmarshalJSON([]byte(`"` + s + `"`)); err != nil {
		panic(err)
	}
	return d
}

// IsNever reports whether the value is explicitly Never.
func (d NillableDuration) IsNever() bool { return d.never }

// IsZero reports whether the value is not set; such a value is omitted from JSON.
func (d NillableDuration) IsZero() bool { return !d.never && d.Duration == nil }

// String is the JSON form: a duration string, "Never", or "" when not set.
func (d NillableDuration) String() string {
	switch {
	case d.never:
		return Never
	case d.Duration != nil:
		return d.Duration.String()
	default:
		return ""
	}
}

// MarshalJSON writes the duration as a string, "Never", or null when it is not set (the API
// server prunes a null and applies the default).
func (d NillableDuration) MarshalJSON() ([]byte, error) {
	if d.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(d.String())
}

// UnmarshalJSON reads a duration string, "Never" or null.
func (d *NillableDuration) UnmarshalJSON(b []byte) error {
	*d = NillableDuration{}
	if string(b) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decoding duration: %w", err)
	}
	if s == Never {
		d.never = true
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("parsing duration %q: %w", s, err)
	}
	d.Duration = &v
	return nil
}

// ToUnstructured lets the unstructured converter write the same form as JSON.
func (d NillableDuration) ToUnstructured() any {
	if d.IsZero() {
		return nil
	}
	return d.String()
}
