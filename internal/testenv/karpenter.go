package testenv

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
)

// KarpenterModule and KarpenterVersion name the release of Karpenter's AWS provider whose charts
// Capstan's must accept and replace.
const KarpenterModule, KarpenterVersion = "github.com/aws/karpenter-provider-aws", "v1.15.0"

// KarpenterChartFiles reads the files of Karpenter's charts whose path under the module's
// charts/ directory starts with prefix ("karpenter-crd/", "karpenter/values.yaml"), keyed by that
// path. They come from the module's zip: the Go module cache's copy, else the module proxy's
// (GOPROXY's first URL); the zip is read, never unpacked into the repository.
func KarpenterChartFiles(prefix string) (map[string][]byte, error) {
	data, err := karpenterModuleZip()
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	charts := KarpenterModule + "@" + KarpenterVersion + "/charts/"
	out := map[string][]byte{}
	for _, f := range zr.File {
		rel, ok := strings.CutPrefix(f.Name, charts)
		if !ok || !strings.HasPrefix(rel, prefix) {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rc)
		_ = rc.Close()
		if err != nil {
			return nil, err
		}
		out[rel] = b
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no file under %s%s in the module", charts, prefix)
	}
	return out, nil
}

// WriteKarpenterChart writes Karpenter's chart name (karpenter or karpenter-crd) into dir and
// returns the chart's directory, for helm.
func WriteKarpenterChart(name, dir string) (string, error) {
	files, err := KarpenterChartFiles(name + "/")
	if err != nil {
		return "", err
	}
	for rel, b := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, name), nil
}

func karpenterModuleZip() ([]byte, error) {
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOPROXY").Output()
	if err != nil {
		return nil, fmt.Errorf("go env: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	rel := filepath.Join("cache", "download", KarpenterModule, "@v", KarpenterVersion+".zip")
	if b, err := os.ReadFile(filepath.Join(lines[0], rel)); err == nil {
		return b, nil
	}
	for _, proxy := range strings.FieldsFunc(lines[1], func(r rune) bool { return r == ',' || r == '|' }) {
		if !strings.HasPrefix(proxy, "http") {
			continue
		}
		url := fmt.Sprintf("%s/%s/@v/%s.zip", strings.TrimSuffix(proxy, "/"), KarpenterModule, KarpenterVersion)
		resp, err := http.Get(url)
		if err != nil {
			return nil, fmt.Errorf("fetching %s: %w", url, err)
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("fetching %s: %s %v", url, resp.Status, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("no module proxy URL in GOPROXY=%s and no %s in the module cache", lines[1], rel)
}
