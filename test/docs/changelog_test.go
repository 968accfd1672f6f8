package docs

import (
	"regexp"
	"strings"
	"testing"
)

// The version the charts publish has its section in CHANGELOG.md: a release cannot go out
// without saying what changed.
func TestChangelogHasTheChartsVersion(t *testing.T) {
	chart := RepoFile(t, "charts", "capstan", "Chart.yaml")
	m := regexp.MustCompile(`(?m)^appVersion: "([^"]+)"$`).FindStringSubmatch(chart)
	if m == nil {
		t.Fatal("charts/capstan/Chart.yaml has no appVersion")
	}
	crd := RepoFile(t, "charts", "capstan-crd", "Chart.yaml")
	if !strings.Contains(crd, `appVersion: "`+m[1]+`"`) {
		t.Errorf("charts/capstan-crd/Chart.yaml's appVersion is not the controller chart's %s", m[1])
	}
	heading := regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(m[1]) + `( |$)`)
	if !heading.MatchString(RepoFile(t, "CHANGELOG.md")) {
		t.Errorf("CHANGELOG.md has no section \"## %s\" for the charts' version", m[1])
	}
}
