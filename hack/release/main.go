// Command release publishes a version of Capstan to an OCI registry (`make release`): the
// image that `make image` wrote to its layout (to <registry>/controller), then the capstan-crd
// and capstan charts (to <registry>/capstan-crd and <registry>/capstan) packaged
// at the same version — the capstan chart's default image set to the pushed image by digest —
// pushed with helm as OCI artifacts. It prints one line per artifact: its reference and digest.
//
//	go run ./hack/release -version 0.1.0 -layout bin/image -registry 127.0.0.1:5000/capstan [-plain-http]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run() error {
	version := flag.String("version", "", "the version to publish (the layout's tag, the charts' version and appVersion)")
	layoutDir := flag.String("layout", "bin/image", "the OCI image layout `make image` wrote")
	registry := flag.String("registry", "", "the registry and path to push to: host[:port]/path (the image goes to <registry>/controller, the charts to oci://<registry>/capstan and oci://<registry>/capstan-crd, as Karpenter lays out its releases)")
	plainHTTP := flag.Bool("plain-http", false, "talk HTTP, not HTTPS, to the registry (a registry on loopback)")
	helm := flag.String("helm", "bin/helm", "the helm binary")
	charts := flag.String("charts", "charts", "the directory holding capstan-crd and capstan")
	out := flag.String("out", "bin/charts", "where the packaged charts are written")
	pluginOut := flag.String("plugin-out", "bin/plugin", "where the kubectl plugin's archives, checksums.txt and krew manifest capstan.yaml are written")
	pluginURL := flag.String("plugin-url", "", "the URL the plugin's archives will be published under (the krew manifest's uris); empty: the archives' names, for krew install --manifest … --archive …")
	pluginPlatforms := flag.String("plugin-platforms", strings.Join(PluginPlatforms, ","), "the platforms to build the kubectl plugin for, os/arch comma-separated")
	flag.Parse()
	if *version == "" || *registry == "" {
		return fmt.Errorf("-version and -registry are required")
	}
	*registry = strings.TrimSuffix(strings.TrimPrefix(*registry, "oci://"), "/")
	idx, err := fromLayout(*layoutDir, *version)
	if err != nil {
		return err
	}
	digest, err := idx.Digest()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "capstan-release-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	// The plugin is built before anything is pushed: a release that cannot build it pushes
	// nothing.
	if err := os.MkdirAll(*pluginOut, 0o755); err != nil {
		return err
	}
	bins, err := buildPlugin(*version, filepath.Join(tmp, "plugin"), strings.Split(*pluginPlatforms, ","))
	if err != nil {
		return err
	}
	manifest, err := packagePlugin(*version, *pluginOut, *pluginURL, bins)
	if err != nil {
		return err
	}
	var opts []name.Option
	if *plainHTTP {
		opts = append(opts, name.Insecure)
	}
	repo := *registry + "/controller"
	ref, err := name.NewTag(repo+":"+*version, opts...)
	if err != nil {
		return fmt.Errorf("-registry %q: %w", *registry, err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		return fmt.Errorf("pushing the image to %s: %w", ref, err)
	}
	fmt.Printf("image %s@%s\n", repo, digest)

	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	for _, chart := range []string{"capstan-crd", "capstan"} {
		dir := filepath.Join(tmp, chart)
		if err := os.CopyFS(dir, os.DirFS(filepath.Join(*charts, chart))); err != nil {
			return fmt.Errorf("copying chart %s: %w", chart, err)
		}
		if err := setChartVersion(filepath.Join(dir, "Chart.yaml"), *version); err != nil {
			return err
		}
		if chart == "capstan" {
			if err := setImage(filepath.Join(dir, "values.yaml"), repo, digest); err != nil {
				return err
			}
		}
		if err := command(*helm, "package", dir, "--destination", *out); err != nil {
			return fmt.Errorf("packaging %s: %w", chart, err)
		}
		pkg := filepath.Join(*out, fmt.Sprintf("%s-%s.tgz", chart, *version))
		args := []string{"push", pkg, "oci://" + *registry}
		if *plainHTTP {
			args = append(args, "--plain-http")
		}
		outText, err := exec.Command(*helm, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("helm push %s: %w\n%s", pkg, err, outText)
		}
		d := regexp.MustCompile(`Digest: (sha256:[0-9a-f]{64})`).FindSubmatch(outText)
		if d == nil {
			return fmt.Errorf("helm push %s printed no digest:\n%s", pkg, outText)
		}
		fmt.Printf("chart oci://%s/%s:%s@%s\n", *registry, chart, *version, d[1])
	}
	fmt.Printf("plugin %s\n", manifest)
	return nil
}

// fromLayout finds the image index tagged version in the layout.
func fromLayout(dir, version string) (v1.ImageIndex, error) {
	root, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the image layout %s (run make image first): %w", dir, err)
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] == version {
			return root.ImageIndex(d.Digest)
		}
	}
	return nil, fmt.Errorf("the image layout %s has no image tagged %s (run make image VERSION=%s)", dir, version, version)
}

// setChartVersion sets the chart's version and appVersion.
func setChartVersion(path, version string) error {
	return rewrite(path, map[*regexp.Regexp]string{
		regexp.MustCompile(`(?m)^version: .*$`):    "version: " + version,
		regexp.MustCompile(`(?m)^appVersion: .*$`): fmt.Sprintf("appVersion: %q", version),
	})
}

// setImage makes the released image, by digest, the capstan chart's default.
func setImage(path, repo string, digest v1.Hash) error {
	return rewrite(path, map[*regexp.Regexp]string{
		// The image's keys may carry their `# --` descriptions.
		regexp.MustCompile(`(?m)^(  image:\n(?:    #.*\n)*    repository: ).*$`): "${1}" + repo,
		regexp.MustCompile(`(?m)^(    digest: ).*$`):                             fmt.Sprintf("${1}%q", digest.String()),
	})
}

// rewrite replaces each pattern's one match in the file; a pattern matching other than once is
// an error (the file's layout changed under the release script).
func rewrite(path string, repl map[*regexp.Regexp]string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	for re, with := range repl {
		if n := len(re.FindAllIndex(b, -1)); n != 1 {
			return fmt.Errorf("%s: %d lines match %s, want exactly one", path, n, re)
		}
		b = re.ReplaceAll(b, []byte(with))
	}
	return os.WriteFile(path, b, 0o644)
}

func command(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}
