package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The released chart's default image is the pushed one by digest; its Chart.yaml names the
// version; a values file whose layout no longer matches is refused, not half-edited.
func TestChartRewrites(t *testing.T) {
	dir := t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	orig, err := os.ReadFile(filepath.Join("..", "..", "charts", "capstan", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(values, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	d := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("ab", 32)}
	if err := setImage(values, "registry.example/capstan/controller", d); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(values)
	if !strings.Contains(string(b), "\n    repository: registry.example/capstan/controller\n") ||
		!strings.Contains(string(b), `    digest: "sha256:`+d.Hex+`"`) {
		t.Fatalf("values after setImage:\n%s", b)
	}
	chart := filepath.Join(dir, "Chart.yaml")
	if err := os.WriteFile(chart, []byte("apiVersion: v2\nname: capstan\nversion: 0.1.0\nappVersion: \"0.1.0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := setChartVersion(chart, "1.2.3"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(chart); string(b) != "apiVersion: v2\nname: capstan\nversion: 1.2.3\nappVersion: \"1.2.3\"\n" {
		t.Fatalf("Chart.yaml after setChartVersion:\n%s", b)
	}
	// Two digest lines: the file is left as it was.
	twice := filepath.Join(dir, "twice.yaml")
	before := "controller:\n  image:\n    repository: a\n    digest: \"\"\nsidecar:\n    digest: \"\"\n"
	if err := os.WriteFile(twice, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := setImage(twice, "r", d); err == nil || !strings.Contains(err.Error(), "2 lines match") {
		t.Fatalf("two digest lines: error %v", err)
	}
	if b, _ := os.ReadFile(twice); string(b) != before {
		t.Fatalf("a refused rewrite changed the file:\n%s", b)
	}
}
