package v1

import (
	"encoding/json"
	"testing"
)

func TestKubeletKeepsTheFieldsItDoesNotModel(t *testing.T) {
	in := `{"maxPods":30,"podPidsLimit":4096,"featureGates":{"SidecarContainers":true}}`
	var k KubeletConfiguration
	if err := json.Unmarshal([]byte(in), &k); err != nil {
		t.Fatal(err)
	}
	if k.MaxPods == nil || *k.MaxPods != 30 || len(k.Extra) != 2 || string(k.Extra["podPidsLimit"].Raw) != "4096" {
		t.Fatalf("read %+v", k)
	}
	out, err := json.Marshal(k)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if back["maxPods"] != float64(30) || back["podPidsLimit"] != float64(4096) || back["featureGates"] == nil || len(back) != 3 {
		t.Errorf("wrote %s", out)
	}
	// A typed field wins over an Extra entry of the same name.
	k.Extra["maxPods"] = k.Extra["podPidsLimit"]
	out, _ = json.Marshal(&k)
	if err := json.Unmarshal(out, &back); err != nil || back["maxPods"] != float64(30) {
		t.Errorf("wrote %s", out)
	}
}
