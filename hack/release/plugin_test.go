package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// stubBins writes a stand-in binary for each platform.
func stubBins(t *testing.T) map[string]string {
	t.Helper()
	bins := map[string]string{}
	for _, pl := range PluginPlatforms {
		p := filepath.Join(t.TempDir(), pluginBinary)
		if err := os.WriteFile(p, []byte("binary for "+pl), 0o755); err != nil {
			t.Fatal(err)
		}
		bins[pl] = p
	}
	return bins
}

// A release's plugin: an archive per platform holding the executable, checksums in sha256sum's
// format, and a krew manifest whose platforms name each archive with its digest; the same
// binaries package to the same bytes.
func TestPackagePluginForKrew(t *testing.T) {
	out := t.TempDir()
	bins := stubBins(t)
	manifest, err := packagePlugin("0.3.0", out, "https://downloads.example/capstan/v0.3.0/", bins)
	if err != nil {
		t.Fatal(err)
	}
	var m krewPlugin
	b, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != "Plugin" || m.Metadata.Name != "capstan" || m.Spec.Version != "v0.3.0" || len(m.Spec.Platforms) != 4 {
		t.Fatalf("manifest %+v", m)
	}
	sums, err := os.ReadFile(filepath.Join(out, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range m.Spec.Platforms {
		pl := PluginPlatforms[i]
		name := archiveName(pl)
		if want := "https://downloads.example/capstan/v0.3.0/" + name; p.URI != want {
			t.Errorf("%s: uri %q, want %q", pl, p.URI, want)
		}
		if p.Selector.MatchLabels["os"]+"/"+p.Selector.MatchLabels["arch"] != pl || p.Bin != pluginBinary {
			t.Errorf("%s: selector %v, bin %q", pl, p.Selector.MatchLabels, p.Bin)
		}
		archive, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(archive)
		if p.SHA256 != hex.EncodeToString(sum[:]) || !strings.Contains(string(sums), p.SHA256+"  "+name+"\n") {
			t.Errorf("%s: sha256 %s is not the archive's, or not in checksums.txt", pl, p.SHA256)
		}
		gz, err := gzip.NewReader(bytes.NewReader(archive))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(gz)
		h, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Name != pluginBinary || h.Mode&0o111 == 0 || string(data) != "binary for "+pl {
			t.Errorf("%s: archive holds %s (mode %o): %q", pl, h.Name, h.Mode, data)
		}
	}
	// Without a URL, the uris are the archives' names (install with --archive).
	again := t.TempDir()
	if _, err := packagePlugin("0.3.0", again, "", bins); err != nil {
		t.Fatal(err)
	}
	b2, _ := os.ReadFile(filepath.Join(again, "capstan.yaml"))
	if !strings.Contains(string(b2), "uri: "+archiveName("linux/amd64")+"\n") {
		t.Errorf("manifest without a URL:\n%s", b2)
	}
	for _, pl := range PluginPlatforms {
		x, _ := os.ReadFile(filepath.Join(out, archiveName(pl)))
		y, _ := os.ReadFile(filepath.Join(again, archiveName(pl)))
		if !bytes.Equal(x, y) {
			t.Errorf("%s: the same binary packaged to different archives", pl)
		}
	}
}
