package operator

import (
	"flag"
	"regexp"
	"strings"
	"testing"

	"capstan.dev/capstan/test/docs"
)

// flagName and envName are a flag and a variable as docs/settings.md's tables spell them.
var (
	flagName = regexp.MustCompile("`--([a-z0-9-]+)`")
	envName  = regexp.MustCompile("`([A-Z][A-Z0-9_]+)`")
)

// documentedFlags reads docs/settings.md's table rows — `--flag` (several, or an alias in
// parentheses) | `ENV` (as many, in the same order) | … — into flag → variable ("" for none).
func documentedFlags(doc string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(doc, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`--") {
			continue
		}
		first, _, _ := strings.Cut(cells[1], "(or ")
		flags := flagName.FindAllStringSubmatch(first, -1)
		envs := envName.FindAllStringSubmatch(cells[2], -1)
		for i, f := range flags {
			out[f[1]] = ""
			if i < len(envs) {
				out[f[1]] = envs[i][1]
			}
		}
		for _, alias := range flagName.FindAllStringSubmatch(strings.TrimPrefix(cells[1], first), -1) {
			out[alias[1]] = "alias"
		}
	}
	return out
}

// Every flag the binary defines is in docs/settings.md with its environment variable, and every
// flag the page names is defined: a setting renamed or added without its doc fails here.
func TestSettingsAreDocumented(t *testing.T) {
	var o Options
	var r raw
	fs, envs := define(&o, &r)
	doc := docs.RepoFile(t, "docs", "settings.md")
	documented := documentedFlags(doc)
	if len(documented) < 20 {
		t.Fatalf("%d flags found in docs/settings.md; the pattern finds none", len(documented))
	}
	defined := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) {
		defined[f.Name] = true
		env, ok := documented[f.Name]
		switch {
		case !ok && envs[f.Name] == "" && strings.Contains(doc, "`capstan --"+f.Name+"`"):
			// A command (--help, --version), told in the page's prose.
		case !ok:
			t.Errorf("flag --%s is not documented in docs/settings.md", f.Name)
		case env == "alias":
		case envs[f.Name] != env:
			t.Errorf("flag --%s: docs/settings.md gives the variable %q, the binary reads %q", f.Name, env, envs[f.Name])
		}
	})
	for name := range documented {
		if !defined[name] {
			t.Errorf("docs/settings.md documents --%s, which the binary does not define", name)
		}
	}
}

// Every feature gate the binary knows (Karpenter's and Capstan's) is in docs/features.md's table.
func TestFeatureGatesAreDocumented(t *testing.T) {
	doc := docs.RepoFile(t, "docs", "features.md")
	for _, g := range featureGates {
		name := g.name
		if !strings.Contains(doc, "| `"+name+"`") && !strings.Contains(doc, "`"+name+"`, `") && !strings.Contains(doc, ", `"+name+"` |") {
			t.Errorf("feature gate %s is not in docs/features.md's table", name)
		}
	}
}

// Each flag's help is one short line (--help prints them all); the long explanation is in
// docs/settings.md, whose rows the test above holds to the flags.
func TestFlagHelpIsShort(t *testing.T) {
	var o Options
	var r raw
	fs, _ := define(&o, &r)
	fs.VisitAll(func(f *flag.Flag) {
		if n := len([]rune(f.Usage)); n > 100 {
			t.Errorf("--%s's help has %d characters (at most 100; say the rest in docs/settings.md): %s", f.Name, n, f.Usage)
		}
	})
}
