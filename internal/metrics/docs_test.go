package metrics

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"capstan.dev/capstan/test/docs"
)

var (
	// fqName is a metric's name in a Desc's text.
	fqName = regexp.MustCompile(`fqName: "([a-z0-9_:]+)"`)
	// metricRow is the first cell of a metrics table's row; metricName a name in it.
	metricRow  = regexp.MustCompile("^ `(karpenter|capstan|operator)_")
	metricName = regexp.MustCompile("`((?:karpenter|capstan|operator)_[a-z0-9_{},]+)`")
)

// Every metric Capstan serves (those New registers, the status-condition and ProvisioningRequest
// collectors) is in docs/controllers.md's metrics table, and every metric the table names is
// served: a metric renamed or added without its doc fails here.
func TestMetricsAreDocumented(t *testing.T) {
	m, err := New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// Describe needs no samples: every family, whether or not it has series yet.
	descs := make(chan *prometheus.Desc, 1024)
	// The collectors the operator registers beside them: status conditions, ProvisioningRequests.
	for _, c := range append(m.collectors(), &StatusConditions{}, &ProvisioningRequests{}) {
		c.Describe(descs)
	}
	close(descs)
	served := map[string]bool{}
	for d := range descs {
		if mm := fqName.FindStringSubmatch(d.String()); mm != nil {
			served[mm[1]] = true
		}
	}
	// The table's first cells: one or more names, `a_{b,c}_d` for several.
	documented := map[string]bool{}
	for _, line := range strings.Split(docs.RepoFile(t, "docs", "controllers.md"), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !metricRow.MatchString(cells[1]) {
			continue
		}
		for _, n := range metricName.FindAllStringSubmatch(cells[1], -1) {
			for _, name := range docs.Expand(n[1]) {
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
