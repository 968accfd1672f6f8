package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"
)

// PluginPlatforms are the platforms a release builds the kubectl plugin for.
var PluginPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// pluginBinary is the plugin's executable name: kubectl finds it on PATH by this name.
const pluginBinary = "kubectl-capstan"

// krewPlugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2), the
// fields a release fills.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage,omitempty"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string     `json:"uri"`
	SHA256 string     `json:"sha256"`
	Bin    string     `json:"bin"`
	Files  []krewFile `json:"files"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// archiveName is the plugin archive of one platform ("linux/amd64").
func archiveName(platform string) string {
	return fmt.Sprintf("%s_%s.tar.gz", pluginBinary, strings.ReplaceAll(platform, "/", "_"))
}

// buildPlugin compiles the plugin for each platform into out/<os>_<arch>/kubectl-capstan.
func buildPlugin(version, out string, platforms []string) (map[string]string, error) {
	bins := map[string]string{}
	for _, pl := range platforms {
		goos, goarch, ok := strings.Cut(pl, "/")
		if !ok {
			return nil, fmt.Errorf("-plugin-platforms: %q is not os/arch", pl)
		}
		bin := filepath.Join(out, goos+"_"+goarch, pluginBinary)
		fmt.Fprintf(os.Stderr, "release: building %s %s for %s\n", pluginBinary, version, pl)
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -buildid= -X main.version="+version, "-o", bin, "./cmd/kubectl-capstan")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+goarch, "GOFLAGS=-mod=readonly")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building %s for %s: %w", pluginBinary, pl, err)
		}
		bins[pl] = bin
	}
	return bins, nil
}

// packagePlugin writes, into out, a tar.gz archive of each platform's binary (bins), a
// checksums.txt in sha256sum's format and the krew manifest capstan.yaml, and returns the
// manifest's path. With baseURL, each platform's uri is baseURL/<archive>, where the archives are
// to be published; without, the archive's name, for `kubectl krew install --manifest … --archive
// …`. Archives are byte-for-byte reproducible: fixed times, owners and modes.
func packagePlugin(version, out, baseURL string, bins map[string]string) (string, error) {
	m := krewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	m.Metadata.Name = "capstan"
	m.Spec.Version = "v" + strings.TrimPrefix(version, "v")
	m.Spec.ShortDescription = "Explain and simulate Capstan's autoscaling decisions"
	m.Spec.Description = "Says why a pod is pending or on its node, why a node was launched or stays, what a\n" +
		"NodePool allows; simulates what Capstan would do next; replays recorded days.\n"
	var sums strings.Builder
	for _, pl := range PluginPlatforms {
		bin, ok := bins[pl]
		if !ok {
			continue
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return "", err
		}
		archive, err := tarGz(pluginBinary, data)
		if err != nil {
			return "", err
		}
		name := archiveName(pl)
		if err := os.WriteFile(filepath.Join(out, name), archive, 0o644); err != nil {
			return "", err
		}
		sum := sha256.Sum256(archive)
		fmt.Fprintf(&sums, "%s  %s\n", hex.EncodeToString(sum[:]), name)
		p := krewPlatform{URI: name, SHA256: hex.EncodeToString(sum[:]), Bin: pluginBinary, Files: []krewFile{{From: pluginBinary, To: "."}}}
		if baseURL != "" {
			p.URI = strings.TrimSuffix(baseURL, "/") + "/" + name
		}
		goos, goarch, _ := strings.Cut(pl, "/")
		p.Selector.MatchLabels = map[string]string{"os": goos, "arch": goarch}
		m.Spec.Platforms = append(m.Spec.Platforms, p)
	}
	if len(m.Spec.Platforms) == 0 {
		return "", fmt.Errorf("no plugin binary for any of %v", PluginPlatforms)
	}
	if err := os.WriteFile(filepath.Join(out, "checksums.txt"), []byte(sums.String()), 0o644); err != nil {
		return "", err
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return "", err
	}
	manifest := filepath.Join(out, "capstan.yaml")
	return manifest, os.WriteFile(manifest, b, 0o644)
}

// tarGz is a gzipped tar holding one executable file.
func tarGz(name string, data []byte) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
