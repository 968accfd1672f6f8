// Package imagebuild assembles Capstan's container image without a container daemon or a base
// image: an OCI image index of one image per platform, each a small base layer written here (the
// nonroot user's passwd and group entries, a home and /tmp) and a layer with the static capstan
// binary and its SBOM. Every byte is a function of the inputs — timestamps are the commit's time,
// tar entries are in a fixed order with fixed owners, layers are compressed by one library — so
// the same binaries give the same digest.
//
// The image has no CA bundle: the binary embeds Mozilla's roots
// (golang.org/x/crypto/x509roots/fallback), which Go uses when the system has none.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Paths and identities inside the image.
const (
	// BinaryPath is the entrypoint.
	BinaryPath = "/usr/local/bin/capstan"
	// SBOMPath is the SPDX document of the binary's modules.
	SBOMPath = "/usr/share/capstan/sbom.spdx.json"
	// UID and GID are the nonroot user the image runs as (distroless's number, which Pod
	// securityContexts and admission policies commonly expect).
	UID, GID = 65532, 65532
)

// Label keys the image's configuration carries.
const (
	LabelTitle    = "org.opencontainers.image.title"
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelCreated  = "org.opencontainers.image.created"
	LabelSource   = "org.opencontainers.image.source"
	// LabelSBOM names the SBOM's path in the image; LabelSBOMDigest its sha256.
	LabelSBOM       = "dev.capstan.sbom"
	LabelSBOMDigest = "dev.capstan.sbom.digest"
)

// Binary is a static linux capstan binary for one architecture.
type Binary struct {
	// Arch is the GOARCH: amd64, arm64.
	Arch string
	// Data is the executable.
	Data []byte
}

// Options describe the image.
type Options struct {
	// Version and Commit are the release's version and VCS revision.
	Version, Commit string
	// Created is the time every timestamp in the image carries: the commit's time, so that a
	// rebuild of the same commit is the same image.
	Created time.Time
	// Source is the repository's URL (the source label); optional.
	Source string
	// Binaries are the platforms' executables, in the index's order.
	Binaries []Binary
}

// Build assembles the image index.
func Build(o Options) (v1.ImageIndex, error) {
	if o.Version == "" {
		return nil, fmt.Errorf("imagebuild: the version is empty")
	}
	if len(o.Binaries) == 0 {
		return nil, fmt.Errorf("imagebuild: no binaries")
	}
	o.Created = o.Created.UTC().Truncate(time.Second)
	base, err := baseLayer(o.Created)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, b := range o.Binaries {
		if b.Arch == "" || seen[b.Arch] {
			return nil, fmt.Errorf("imagebuild: two binaries for %q, or one without an architecture", b.Arch)
		}
		seen[b.Arch] = true
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var adds []mutate.IndexAddendum
	for _, b := range o.Binaries {
		img, err := platformImage(o, base, b)
		if err != nil {
			return nil, fmt.Errorf("imagebuild: linux/%s: %w", b.Arch, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: "linux", Architecture: b.Arch}}})
	}
	idx = mutate.AppendManifests(idx, adds...)
	out, ok := mutate.Annotations(idx, annotations(o)).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("imagebuild: annotating the index")
	}
	return out, nil
}

func annotations(o Options) map[string]string {
	a := map[string]string{LabelTitle: "capstan", LabelVersion: o.Version, LabelCreated: o.Created.Format(time.RFC3339)}
	if o.Commit != "" {
		a[LabelRevision] = o.Commit
	}
	if o.Source != "" {
		a[LabelSource] = o.Source
	}
	return a
}

// platformImage is one platform's image: the base layer, the binary's layer, the configuration.
func platformImage(o Options, base v1.Layer, b Binary) (v1.Image, error) {
	sbom, err := SBOM(b.Data, "capstan-"+o.Version+"-linux-"+b.Arch, o.Created)
	if err != nil {
		return nil, err
	}
	app, err := layer(o.Created, []entry{
		dir("usr/", 0o755, 0), dir("usr/local/", 0o755, 0), dir("usr/local/bin/", 0o755, 0),
		file(BinaryPath[1:], 0o755, b.Data),
		dir("usr/share/", 0o755, 0), dir("usr/share/capstan/", 0o755, 0),
		file(SBOMPath[1:], 0o644, sbom),
	})
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	created := v1.Time{Time: o.Created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "capstan imagebuild: nonroot user, /tmp", Comment: "base"}},
		mutate.Addendum{Layer: app, MediaType: types.OCILayer, History: v1.History{Created: created, CreatedBy: "capstan imagebuild: " + BinaryPath + " " + o.Version, Comment: "capstan"}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", b.Arch, created
	labels := annotations(o)
	labels[LabelSBOM] = SBOMPath
	labels[LabelSBOMDigest] = sha256Hex(sbom)
	cf.Config = v1.Config{
		User:       fmt.Sprintf("%d:%d", UID, GID),
		Entrypoint: []string{BinaryPath},
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin", "HOME=/home/nonroot"},
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

// baseLayer holds what a scratch image lacks for a nonroot process: the user and group by name
// (for tools that resolve them), its home, and a writable /tmp.
func baseLayer(created time.Time) (v1.Layer, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", UID, GID)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", GID)
	return layer(created, []entry{
		dir("etc/", 0o755, 0),
		file("etc/group", 0o644, []byte(group)),
		file("etc/passwd", 0o644, []byte(passwd)),
		dir("home/", 0o755, 0),
		dir("home/nonroot/", 0o700, UID),
		dir("tmp/", 0o1777, 0),
	})
}

// entry is one tar entry.
type entry struct {
	name  string
	mode  int64
	owner int
	data  []byte
	isDir bool
}

func dir(name string, mode int64, owner int) entry {
	return entry{name: name, mode: mode, owner: owner, isDir: true}
}

func file(name string, mode int64, data []byte) entry {
	return entry{name: name, mode: mode, data: data}
}

// layer writes the entries, in the given order, into a gzip-compressed OCI layer whose every
// timestamp is created.
func layer(created time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.owner, Gid: e.owner, ModTime: created, Format: tar.FormatPAX}
		if e.isDir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
}

// WriteLayout writes the index into an OCI image layout directory (created if missing, replaced
// if it holds one), tagged with ref (org.opencontainers.image.ref.name), and returns the index's
// digest.
func WriteLayout(dir, ref string, idx v1.ImageIndex) (v1.Hash, error) {
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}
