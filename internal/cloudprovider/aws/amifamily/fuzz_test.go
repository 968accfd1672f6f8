package amifamily_test

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"slices"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"capstan.dev/capstan/internal/cloudprovider/aws/amifamily"
)

// FuzzUserData merges any spec.userData into each family's user data. What Validate accepts
// merges (and what it refuses does not, naming spec.userData); a merged MIME document (AL2,
// AL2023) holds the class's parts unchanged and in order beside Capstan's own, whatever text the
// class's parts carry; a merged Bottlerocket document is TOML whose cluster, endpoint, node taints
// and Capstan's node labels are Capstan's, and whose settings.kubernetes keys Bottlerocket knows.
func FuzzUserData(f *testing.F) {
	for _, s := range []string{
		"",
		"#!/bin/bash\necho hello\n",
		"MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"CLASS\"\n\n--CLASS\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n#!/bin/bash\necho one\n\n--CLASS--\n",
		"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=\"==B==\"\r\n\r\n--==B==\r\nContent-Type: application/node.eks.aws\r\n\r\napiVersion: node.eks.aws/v1alpha1\r\nkind: NodeConfig\r\nspec: {}\r\n\r\n--==B==--\r\n",
		"#!/bin/bash\ncat <<'EOF'\n--//\nContent-Type: text/plain\n\nnot a part\nEOF\n",
		"#!/bin/bash\r\necho a\r\n--//\r\n\r\necho b\r\n",
		"[settings.kubernetes]\nkube-api-qps = 30\ncluster-name = \"other\"\n[settings.kubernetes.node-labels]\nteam = \"storage\"\n",
		"[settings]\nkubernetes = 3\n",
		"x = 1\n[settings.autoscaling]\nshould-wait = true\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, custom string) {
		for _, family := range []amifamily.Family{amifamily.AL2, amifamily.AL2023, amifamily.Bottlerocket} {
			verr := amifamily.Validate(family, custom)
			ud, err := amifamily.UserData(family, bootstrap(custom))
			if verr != nil {
				if !strings.Contains(verr.Error(), "spec.userData") {
					t.Fatalf("%s: Validate's error does not name spec.userData: %v", family, verr)
				}
				if err == nil {
					t.Fatalf("%s: Validate refused what merges: %v", family, verr)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s: Validate accepted what does not merge: %v", family, err)
			}
			if family == amifamily.Bottlerocket {
				checkBottlerocket(t, ud)
				continue
			}
			checkParts(t, family, custom, ud)
		}
	})
}

// checkParts: ud's parts are the class's (read independently here) with Capstan's before them
// (AL2023: the NodeConfig) or after them (AL2: the kubelet merge script, if any, and the
// bootstrap.sh call).
func checkParts(t *testing.T, family amifamily.Family, custom, ud string) {
	t.Helper()
	got, err := parts(ud)
	if err != nil {
		t.Fatalf("%s: merged user data is not a MIME document: %v\n%q", family, err, ud)
	}
	want := []string(nil)
	if strings.TrimSpace(custom) != "" {
		want = []string{custom}
		trimmed := strings.TrimSpace(custom)
		if strings.HasPrefix(trimmed, "MIME-Version:") || strings.HasPrefix(trimmed, "Content-Type:") {
			if want, err = parts(custom); err != nil {
				t.Fatalf("%s: merged a class's MIME document this reader refuses (%v): %q", family, err, custom)
			}
		}
	}
	var class []string
	switch family {
	case amifamily.AL2023:
		if len(got) == 0 || !strings.Contains(got[0], "kind: NodeConfig") {
			t.Fatalf("AL2023: the first part is not Capstan's NodeConfig: %q", ud)
		}
		class = got[1:]
	case amifamily.AL2:
		if len(got) == 0 || !strings.Contains(got[len(got)-1], "/etc/eks/bootstrap.sh prod ") {
			t.Fatalf("AL2: the last part is not Capstan's bootstrap.sh call: %q", ud)
		}
		class = got[:len(got)-1]
		if len(class) > len(want) {
			class = class[:len(want)] // the kubelet merge script
		}
	}
	if !slices.Equal(class, want) {
		t.Fatalf("%s: the class's parts came out as %q, want %q (merged: %q)", family, class, want, ud)
	}
}

// parts are the bodies of a MIME multi-part document's parts, read with the standard library
// from the boundary its header names. A body with a line that starts with the boundary's
// delimiter is an error: Go's reader takes it as text when it ends in LF, a stricter reader
// (cloud-init's) as the start of another part.
func parts(doc string) ([]string, error) {
	head, body, ok := strings.Cut(doc, "\r\n\r\n")
	if i := strings.Index(doc, "\n\n"); i >= 0 && (!ok || i < len(head)) {
		head, body = doc[:i], doc[i+2:]
	}
	var boundary string
	for _, line := range strings.Split(head, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && strings.EqualFold(k, "Content-Type") {
			_, params, err := mime.ParseMediaType(strings.TrimSpace(v))
			if err != nil {
				return nil, err
			}
			boundary = params["boundary"]
		}
	}
	if boundary == "" {
		return nil, errors.New("no boundary")
	}
	var out []string
	r := multipart.NewReader(strings.NewReader(body), boundary)
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return nil, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "--"+boundary) {
				return nil, fmt.Errorf("a part holds the delimiter %q", "--"+boundary)
			}
		}
		out = append(out, string(b))
	}
}

// checkBottlerocket: ud is TOML with Capstan's cluster, endpoint, taints and labels.
func checkBottlerocket(t *testing.T, ud string) {
	t.Helper()
	// Maps, not structs: go-toml matches struct fields without regard to case, and Bottlerocket's
	// keys are exact (a class's [settings.kuBernetes] is another table, passed through).
	var doc map[string]any
	if err := toml.Unmarshal([]byte(ud), &doc); err != nil {
		t.Fatalf("Bottlerocket: merged user data is not TOML: %v\n%s", err, ud)
	}
	settings, _ := doc["settings"].(map[string]any)
	kube, _ := settings["kubernetes"].(map[string]any)
	if kube["cluster-name"] != "prod" || kube["api-server"] != "https://kube:6443" || kube["cluster-certificate"] != "Q0E=" {
		t.Fatalf("Bottlerocket: the cluster is not Capstan's: %v", kube)
	}
	labels, _ := kube["node-labels"].(map[string]any)
	if labels["karpenter.sh/nodepool"] != "default" || labels["team"] != "capstan" {
		t.Fatalf("Bottlerocket: node labels %v lack Capstan's", kube["node-labels"])
	}
	taints, _ := kube["node-taints"].(map[string]any)
	gpu, _ := taints["gpu"].([]any)
	if len(taints) != 2 || !slices.Equal(gpu, []any{"true:NoSchedule"}) {
		t.Fatalf("Bottlerocket: node taints %v are not the NodePool's", kube["node-taints"])
	}
	for k := range kube {
		one, err := toml.Marshal(map[string]any{"settings": map[string]any{"kubernetes": map[string]any{k: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(amifamily.Dropped(amifamily.Bottlerocket, string(one), nil), "settings.kubernetes."+k) {
			t.Fatalf("Bottlerocket: merged user data keeps settings.kubernetes.%s, which Bottlerocket refuses", k)
		}
	}
}
