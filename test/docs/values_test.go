package docs

import (
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// valuesKey is a chart values key as docs/install.md spells it: `settings.{a,b}c`, `x.*`.
var valuesKey = regexp.MustCompile("`([a-z][A-Za-z0-9]*(?:[.{][A-Za-z0-9.,{}*]*)?)`")

// keyPaths are the dotted paths of a values document's keys, down to the first value that is
// not a map.
func keyPaths(prefix string, v any, out *[]string) {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		*out = append(*out, prefix)
		return
	}
	for k, sub := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		keyPaths(p, sub, out)
	}
}

// Every key of the capstan chart's values.yaml is in docs/install.md's "Karpenter's values" (its
// table, or Capstan's own keys after it) — the key itself or a key above it — and every key the
// section names is in values.yaml: a values key renamed or added without its doc fails here.
func TestChartValuesAreDocumented(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal([]byte(RepoFile(t, "charts", "capstan", "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	var paths []string
	keyPaths("", values, &paths)
	sort.Strings(paths)
	section := RepoFile(t, "docs", "install.md")
	start := strings.Index(section, "## Karpenter's values")
	if start < 0 {
		t.Fatal(`docs/install.md has no "## Karpenter's values" section`)
	}
	section = section[start:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(line, "|")
		text := line
		if len(cells) >= 3 {
			if strings.Contains(cells[1], "karpenter-crd") {
				continue // the CRD chart's keys
			}
			text = cells[1] // a table row: its first cell names the keys
		} else if !strings.HasPrefix(line, "Capstan's own keys") && !strings.Contains(line, "`settings.") && !strings.Contains(line, "`controller.") {
			continue
		}
		for _, m := range valuesKey.FindAllStringSubmatch(text, -1) {
			if strings.ToUpper(m[1]) == m[1] {
				continue
			}
			for _, k := range Expand(m[1]) {
				documented[strings.TrimSuffix(k, ".*")] = true
			}
		}
	}
	if len(documented) < 30 {
		t.Fatalf("%d keys found documented; the patterns find none", len(documented))
	}
	covered := func(path string) bool {
		for p := path; ; {
			if documented[p] {
				return true
			}
			i := strings.LastIndex(p, ".")
			if i < 0 {
				return false
			}
			p = p[:i]
		}
	}
	for _, p := range paths {
		if !covered(p) {
			t.Errorf("values key %s is not in docs/install.md's \"Karpenter's values\"", p)
		}
	}
	exists := func(key string) bool {
		return slices.ContainsFunc(paths, func(p string) bool { return p == key || strings.HasPrefix(p, key+".") })
	}
	for k := range documented {
		// Named as absent on purpose (Karpenter's key Capstan's chart does not have).
		if k == "controller.image.pullPolicy" {
			continue
		}
		if !exists(k) {
			t.Errorf("docs/install.md documents the values key %s, which charts/capstan/values.yaml does not have", k)
		}
	}
}
