package imagebuild

import (
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// SBOM is an SPDX 2.3 JSON document of a Go binary: the main module, every module linked into it
// (from the build information the linker embeds) and the Go toolchain, each with its version, its
// package URL and, for modules, the go.sum hash it was built from. name names the document; it
// is a function of the binary and created alone.
func SBOM(binary []byte, name string, created time.Time) ([]byte, error) {
	bi, err := buildinfo.Read(bytes.NewReader(binary))
	if err != nil {
		return nil, fmt.Errorf("reading the binary's build information: %w", err)
	}
	sum := sha256Hex(binary)
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: name,
		DocumentNamespace: "https://capstan.dev/spdx/" + name + "-" + sum,
		CreationInfo:      spdxCreationInfo{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: capstan-imagebuild"}},
	}
	mainID := "SPDXRef-Package-main"
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: mainID, Name: bi.Main.Path, VersionInfo: bi.Main.Version, DownloadLocation: "NOASSERTION",
		PrimaryPurpose: "APPLICATION", Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: sum}},
		ExternalRefs: []spdxRef{purl(bi.Main.Path, bi.Main.Version)},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", mainID})
	goID := "SPDXRef-Package-go"
	doc.Packages = append(doc.Packages, spdxPackage{
		SPDXID: goID, Name: "go", VersionInfo: strings.TrimPrefix(bi.GoVersion, "go"), DownloadLocation: "https://go.dev/dl/",
		ExternalRefs: []spdxRef{purl("stdlib", strings.TrimPrefix(bi.GoVersion, "go"))},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{mainID, "DEPENDS_ON", goID})
	for i, d := range bi.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		id := fmt.Sprintf("SPDXRef-Package-%d-%s", i, spdxIDPart(m.Path))
		p := spdxPackage{SPDXID: id, Name: m.Path, VersionInfo: m.Version, DownloadLocation: "NOASSERTION",
			ExternalRefs: []spdxRef{purl(m.Path, m.Version)}}
		if m.Sum != "" {
			p.Comment = "go.sum " + m.Sum
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{mainID, "DEPENDS_ON", id})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func purl(path, version string) spdxRef {
	loc := "pkg:golang/" + path
	if version != "" && version != "(devel)" {
		loc += "@" + version
	}
	return spdxRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: loc}
}

// spdxIDPart is s with every character an SPDX identifier does not allow replaced by '-'.
func spdxIDPart(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	SPDXID           string         `json:"SPDXID"`
	Name             string         `json:"name"`
	VersionInfo      string         `json:"versionInfo,omitempty"`
	DownloadLocation string         `json:"downloadLocation"`
	FilesAnalyzed    bool           `json:"filesAnalyzed"`
	PrimaryPurpose   string         `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum `json:"checksums,omitempty"`
	ExternalRefs     []spdxRef      `json:"externalRefs,omitempty"`
	Comment          string         `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}
