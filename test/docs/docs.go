// Package docs tests the documentation against the repository: every relative link and anchor in
// the README and docs/ resolves, every make target they name exists, and the chart's values keys
// are all in docs/install.md. Its
// helpers serve the tests elsewhere that hold a reference table to the code they document (the
// settings and feature gates in internal/operator, the metrics in internal/metrics).
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/testenv"
)

// RepoFile returns a file of the repository, its path given from the module's root.
func RepoFile(t testing.TB, parts ...string) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(append([]string{root}, parts...)...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// brace is a {a,b} alternative in a name as the docs' tables write several at once.
var brace = regexp.MustCompile(`\{([^{}]+)\}`)

// Expand spells out a name's {a,b} alternatives: `settings.{ami,subnet}RefreshInterval` is
// settings.amiRefreshInterval and settings.subnetRefreshInterval.
func Expand(name string) []string {
	m := brace.FindStringSubmatchIndex(name)
	if m == nil {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(name[m[2]:m[3]], ",") {
		out = append(out, Expand(name[:m[0]]+alt+name[m[1]:])...)
	}
	return out
}
