package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"capstan.dev/capstan/internal/testenv"
)

var (
	// fqName is a metric's name in a Desc's text.
	fqName = regexp.MustCompile(`fqName: "([a-z0-9_:]+)"`)
	// metricRow is the first cell of a metrics table's row; metricName a name in it.
	metricRow  = regexp.MustCompile("^ `(karpenter|capstan|operator)_")
	metricName = regexp.MustCompile("`((?:karpenter|capstan|operator)_[a-z0-9_{},]+)`")
	brace      = regexp.MustCompile(`\{([a-z0-9_,]+)\}`)
)

// expand spells out a name's {a,b} alternatives.
func expand(name string) []string {
	m := brace.FindStringSubmatchIndex(name)
	if m == nil {
		return []string{name}
	}
	var out []string
	for _, alt := range strings.Split(name[m[2]:m[3]], ",") {
		out = append(out, expand(name[:m[0]]+alt+name[m[1]:])...)
	}
	return out
}

// Every metric Capstan serves (those New registers, and the status-condition collector) is in
// docs/controllers.md's metrics table, and every metric the table names is served: a metric
// renamed or added without its doc fails here.
func TestMetricsAreDocumented(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// Describe needs no samples: every family, whether or not it has series yet.
	descs := make(chan *prometheus.Desc, 1024)
	for _, c := range append(m.collectors(), &StatusConditions{}) {
		c.Describe(descs)
	}
	close(descs)
	served := map[string]bool{}
	for d := range descs {
		if mm := fqName.FindStringSubmatch(d.String()); mm != nil {
			served[mm[1]] = true
		}
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "controllers.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The table's first cells: one or more names, `a_{b,c}_d` for several.
	documented := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !metricRow.MatchString(cells[1]) {
			continue
		}
		for _, n := range metricName.FindAllStringSubmatch(cells[1], -1) {
			for _, name := range expand(n[1]) {
				documented[name] = true
			}
		}
	}
	if len(served) < 20 || len(documented) < 20 {
		t.Fatalf("%d metrics served, %d documented: the patterns find none", len(served), len(documented))
	}
	for name := range served {
		if !documented[name] {
			t.Errorf("metric %s is served but not in docs/controllers.md's metrics table", name)
		}
	}
	for name := range documented {
		if !served[name] {
			t.Errorf("docs/controllers.md documents the metric %s, which Capstan does not serve", name)
		}
	}
}
