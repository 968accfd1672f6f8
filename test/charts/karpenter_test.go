package charts

import (
	"archive/zip"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// karpenterModule is the module whose charts Capstan's must accept.
const karpenterModule, karpenterVersion = "github.com/aws/karpenter-provider-aws", "v1.15.0"

// karpenterChartFile reads a file of Karpenter's charts from its module's zip: the Go module
// cache's copy, else the module proxy's (GOPROXY's first URL). The zip is read, not unpacked into
// the repository.
func karpenterChartFile(t *testing.T, name string) []byte {
	t.Helper()
	data := moduleZip(t)
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	want := karpenterModule + "@" + karpenterVersion + "/charts/" + name
	for _, f := range zr.File {
		if f.Name != want {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	t.Fatalf("%s is not in the module", want)
	return nil
}

func moduleZip(t *testing.T) []byte {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	rel := filepath.Join("cache", "download", karpenterModule, "@v", karpenterVersion+".zip")
	if b, err := os.ReadFile(filepath.Join(lines[0], rel)); err == nil {
		return b
	}
	for _, proxy := range strings.FieldsFunc(lines[1], func(r rune) bool { return r == ',' || r == '|' }) {
		if !strings.HasPrefix(proxy, "http") {
			continue
		}
		url := fmt.Sprintf("%s/%s/@v/%s.zip", strings.TrimSuffix(proxy, "/"), karpenterModule, karpenterVersion)
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("fetching %s: %v", url, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("fetching %s: %s %v", url, resp.Status, err)
		}
		return b
	}
	t.Fatalf("no module proxy URL in GOPROXY=%s and no %s in the module cache", lines[1], rel)
	return nil
}

// Karpenter v1.15's own values.yaml renders with Capstan's chart: every key is known. Its
// controller.image names Karpenter's image, which Capstan's chart refuses (it would run Karpenter
// under Capstan's chart), so the image keys are overridden; every other value is Karpenter's.
func TestKarpenterValuesFileRenders(t *testing.T) {
	values := string(karpenterChartFile(t, "karpenter/values.yaml"))
	if _, err := render(t, []string{values}, "settings.clusterName=orders"); err == nil || !strings.Contains(err.Error(), "Karpenter's image") {
		t.Fatalf("Karpenter's values.yaml as is: %v; want only its image refused", err)
	}
	out, err := render(t, []string{values}, "settings.clusterName=orders",
		"controller.image.repository=ghcr.io/capstan-dev/controller", "controller.image.tag=0.1.0", "controller.image.digest=")
	if err != nil {
		t.Fatalf("Karpenter v1.15's values.yaml does not render with Capstan's chart:\n%v", err)
	}
	if !strings.Contains(out, "image: ghcr.io/capstan-dev/controller:0.1.0") {
		t.Error("the rendered Deployment does not run Capstan's image")
	}
	// The CRD chart's values.
	root := moduleRoot(t)
	crdValues := filepath.Join(t.TempDir(), "crd-values.yaml")
	if err := os.WriteFile(crdValues, karpenterChartFile(t, "karpenter-crd/values.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(root, "bin", "helm"), "template", "capstan-crd", filepath.Join(root, "charts", "capstan-crd"),
		"-f", crdValues).CombinedOutput(); err != nil {
		t.Fatalf("Karpenter v1.15's karpenter-crd values.yaml does not render with Capstan's CRD chart: %v\n%s", err, out)
	}
}
