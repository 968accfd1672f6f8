package imagebuild_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"capstan.dev/capstan/internal/imagebuild"
)

// testBinary is this test's own executable: a real Go binary with build information.
func testBinary(t *testing.T) []byte {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var created = time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)

func options(t *testing.T) imagebuild.Options {
	bin := testBinary(t)
	return imagebuild.Options{Version: "v0.1.0", Commit: "0123456789abcdef0123456789abcdef01234567", Created: created,
		Source: "https://example.com/capstan", Binaries: []imagebuild.Binary{{Arch: "amd64", Data: bin}, {Arch: "arm64", Data: bin}}}
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// The same inputs give the same index digest, byte for byte; the time is an input (the commit's),
// not the clock's.
func TestBuildIsReproducible(t *testing.T) {
	o := options(t)
	a, err := imagebuild.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := imagebuild.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if da, db := digest(t, a), digest(t, b); da != db {
		t.Fatalf("two builds of the same inputs: %s and %s", da, db)
	}
	o.Created = o.Created.Add(time.Second)
	c, err := imagebuild.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, c) == digest(t, a) {
		t.Fatal("another commit time gave the same digest")
	}
}

// Each platform's image runs the binary as the nonroot user, carries the version, commit and SBOM
// in its labels, and holds exactly the files the package writes, owned and timed as it says.
func TestImageContents(t *testing.T) {
	o := options(t)
	idx, err := imagebuild.Build(o)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex || im.Annotations[imagebuild.LabelVersion] != "v0.1.0" || im.Annotations[imagebuild.LabelRevision] != o.Commit {
		t.Fatalf("index: media type %s, annotations %v", im.MediaType, im.Annotations)
	}
	var archs []string
	for _, m := range im.Manifests {
		archs = append(archs, m.Platform.OS+"/"+m.Platform.Architecture)
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != m.Platform.Architecture || cf.OS != "linux" || !cf.Created.Time.Equal(created) {
			t.Errorf("%s: config says %s/%s created %v", m.Platform.Architecture, cf.OS, cf.Architecture, cf.Created)
		}
		if cf.Config.User != "65532:65532" || len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != imagebuild.BinaryPath {
			t.Errorf("%s: user %q, entrypoint %v", m.Platform.Architecture, cf.Config.User, cf.Config.Entrypoint)
		}
		l := cf.Config.Labels
		if l[imagebuild.LabelVersion] != "v0.1.0" || l[imagebuild.LabelRevision] != o.Commit || l[imagebuild.LabelCreated] != "2026-12-02T08:00:00Z" ||
			l[imagebuild.LabelSource] != o.Source || l[imagebuild.LabelSBOM] != imagebuild.SBOMPath {
			t.Errorf("%s: labels %v", m.Platform.Architecture, l)
		}
		files := contents(t, img)
		if !bytes.Equal(files[imagebuild.BinaryPath].data, o.Binaries[0].Data) || files[imagebuild.BinaryPath].mode != 0o755 {
			t.Errorf("%s: %s is not the binary, mode 0755", m.Platform.Architecture, imagebuild.BinaryPath)
		}
		sbom := files[imagebuild.SBOMPath].data
		if sum := sha256.Sum256(sbom); hex.EncodeToString(sum[:]) != l[imagebuild.LabelSBOMDigest] {
			t.Errorf("%s: the SBOM's sha256 is not the label's %s", m.Platform.Architecture, l[imagebuild.LabelSBOMDigest])
		}
		if !strings.Contains(string(files["/etc/passwd"].data), "nonroot:x:65532:65532:") {
			t.Errorf("%s: /etc/passwd has no nonroot user: %q", m.Platform.Architecture, files["/etc/passwd"].data)
		}
		if f := files["/home/nonroot"]; f.uid != 65532 || f.mode != 0o700 {
			t.Errorf("%s: /home/nonroot is owned by %d with mode %o", m.Platform.Architecture, f.uid, f.mode)
		}
		if f := files["/tmp"]; f.mode != 0o1777 {
			t.Errorf("%s: /tmp has mode %o", m.Platform.Architecture, f.mode)
		}
		for name, f := range files {
			if !f.modTime.Equal(created) {
				t.Errorf("%s: %s is dated %v", m.Platform.Architecture, name, f.modTime)
			}
			if name != "/home/nonroot" && f.uid != 0 {
				t.Errorf("%s: %s is owned by %d", m.Platform.Architecture, name, f.uid)
			}
		}
	}
	if strings.Join(archs, ",") != "linux/amd64,linux/arm64" {
		t.Fatalf("platforms %v", archs)
	}
}

type fileInfo struct {
	data    []byte
	mode    int64
	uid     int
	modTime time.Time
}

// contents reads every layer's files (later layers win).
func contents(t *testing.T, img v1.Image) map[string]fileInfo {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]fileInfo{}
	for _, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer media type %s", mt)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out["/"+strings.TrimSuffix(h.Name, "/")] = fileInfo{data: data, mode: h.Mode, uid: h.Uid, modTime: h.ModTime}
		}
		_ = rc.Close()
	}
	return out
}

// The SBOM names the binary's main module, the modules linked into it with their versions and
// package URLs, and the Go toolchain, with identifiers SPDX allows. The binary is the image
// command's (a test binary records no modules).
func TestSBOMListsTheModules(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "image")
	if out, err := exec.Command("go", "build", "-o", bin, "capstan.dev/capstan/hack/image").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	out, err := imagebuild.SBOM(data, "test", created)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			SPDXID       string `json:"SPDXID"`
			Name         string `json:"name"`
			VersionInfo  string `json:"versionInfo"`
			ExternalRefs []struct {
				Locator string `json:"referenceLocator"`
			} `json:"externalRefs"`
		} `json:"packages"`
		Relationships []struct {
			Element, Type, Related string
		} `json:"relationships"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Fatalf("spdxVersion %q", doc.SPDXVersion)
	}
	valid := regexp.MustCompile(`^SPDXRef-[A-Za-z0-9.-]+$`)
	ids := map[string]bool{}
	byName := map[string]string{}
	for _, p := range doc.Packages {
		if !valid.MatchString(p.SPDXID) || ids[p.SPDXID] {
			t.Errorf("SPDXID %q invalid or repeated", p.SPDXID)
		}
		ids[p.SPDXID] = true
		byName[p.Name] = p.VersionInfo
		if len(p.ExternalRefs) != 1 || !strings.HasPrefix(p.ExternalRefs[0].Locator, "pkg:golang/") {
			t.Errorf("package %s: purl %v", p.Name, p.ExternalRefs)
		}
	}
	if _, ok := byName["capstan.dev/capstan"]; !ok {
		t.Errorf("the main module is missing: %v", byName)
	}
	if v := byName["github.com/google/go-containerregistry"]; v != "v0.22.1" {
		t.Errorf("go-containerregistry listed at %q, want v0.22.1", v)
	}
	if v := byName["go"]; v == "" {
		t.Errorf("the Go toolchain is missing")
	}
	if _, err := imagebuild.SBOM([]byte("not a binary"), "x", created); err == nil {
		t.Error("an SBOM of bytes that are no Go binary")
	}
}

// The layout holds the index under its version, readable back at the same digest.
func TestWriteLayout(t *testing.T) {
	idx, err := imagebuild.Build(options(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	d, err := imagebuild.WriteLayout(dir, "v0.1.0", idx)
	if err != nil {
		t.Fatal(err)
	}
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	rm, err := root.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(rm.Manifests) != 1 || rm.Manifests[0].Digest != d || rm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "v0.1.0" {
		t.Fatalf("layout index: %+v", rm.Manifests)
	}
	back, err := root.ImageIndex(d)
	if err != nil {
		t.Fatal(err)
	}
	if digest(t, back) != d {
		t.Fatal("the index read back has another digest")
	}
}

func TestBadOptionsAreRefused(t *testing.T) {
	bin := []byte("x")
	for _, tc := range []struct {
		name string
		o    imagebuild.Options
		want string
	}{
		{"no version", imagebuild.Options{Binaries: []imagebuild.Binary{{Arch: "amd64", Data: bin}}}, "version"},
		{"no binaries", imagebuild.Options{Version: "v1"}, "no binaries"},
		{"one arch twice", imagebuild.Options{Version: "v1", Binaries: []imagebuild.Binary{{Arch: "amd64", Data: bin}, {Arch: "amd64", Data: bin}}}, `two binaries for "amd64"`},
		{"not a Go binary", imagebuild.Options{Version: "v1", Binaries: []imagebuild.Binary{{Arch: "arm64", Data: bin}}}, "linux/arm64"},
	} {
		if _, err := imagebuild.Build(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}
