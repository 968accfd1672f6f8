package v1

import (
	"encoding/json"
	"testing"
	"time"
)

func TestNillableDurationJSON(t *testing.T) {
	tests := []struct {
		in        string
		wantNever bool
		wantZero  bool
		want      time.Duration
		out       string
	}{
		{in: `"720h"`, want: 720 * time.Hour, out: `"720h0m0s"`},
		{in: `"1h30m"`, want: 90 * time.Minute, out: `"1h30m0s"`},
		{in: `"Never"`, wantNever: true, out: `"Never"`},
		{in: `null`, wantZero: true, out: `null`},
	}
	for _, tc := range tests {
		var d NillableDuration
		if err := json.Unmarshal([]byte(tc.in), &d); err != nil {
			t.Fatalf("unmarshal %s: %v", tc.in, err)
		}
		if d.IsNever() != tc.wantNever || d.IsZero() != tc.wantZero {
			t.Errorf("%s: IsNever %v IsZero %v, want %v %v", tc.in, d.IsNever(), d.IsZero(), tc.wantNever, tc.wantZero)
		}
		if !tc.wantNever && !tc.wantZero && (d.Duration == nil || *d.Duration != tc.want) {
			t.Errorf("%s: duration %v, want %v", tc.in, d.Duration, tc.want)
		}
		b, err := json.Marshal(d)
		if err != nil || string(b) != tc.out {
			t.Errorf("%s: marshal = %s, %v; want %s", tc.in, b, err, tc.out)
		}
	}
	var d NillableDuration
	if err := json.Unmarshal([]byte(`"30d"`), &d); err == nil {
		t.Error(`"30d" parsed; want an error`)
	}
}

func TestNillableDurationIsOmittedWhenNotSet(t *testing.T) {
	b, err := json.Marshal(NodeClaimSpec{Requirements: Requirements{}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if _, ok := m["expireAfter"]; ok {
		t.Errorf("an unset expireAfter was written: %s", b)
	}
	b, err = json.Marshal(NodeClaimSpec{ExpireAfter: NeverDuration()})
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["expireAfter"] != "Never" {
		t.Errorf("expireAfter = %v, want Never", m["expireAfter"])
	}
}
