package charts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/testenv"
)

// karpenterChartFile reads one file of Karpenter's charts (testenv.KarpenterChartFiles).
func karpenterChartFile(t *testing.T, name string) []byte {
	t.Helper()
	files, err := testenv.KarpenterChartFiles(name)
	if err != nil {
		t.Fatal(err)
	}
	b, ok := files[name]
	if !ok {
		t.Fatalf("%s is not in Karpenter's charts", name)
	}
	return b
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
