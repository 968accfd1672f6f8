package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/testenv"
)

// link is a Markdown inline link's target: [text](target).
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// heading is a Markdown ATX heading.
var heading = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)

// anchor is the id GitHub gives a heading: lower case, punctuation other than hyphens and
// underscores dropped, spaces as hyphens.
func anchor(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	var b strings.Builder
	for _, r := range h {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the ids of a Markdown file's headings (a repeated heading gets -1, -2 …).
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(stripFences(string(b)), "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			a := anchor(strings.NewReplacer("`", "", "*", "").Replace(m[1]))
			if n := seen[a]; n > 0 {
				out[a+"-"+string(rune('0'+n))] = true
			} else {
				out[a] = true
			}
			seen[a]++
		}
	}
	return out
}

// docPages returns the module's root and its pages: docs/*.md and the others named (paths from
// the root).
func docPages(t *testing.T, others ...string) (root string, files []string) {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err = filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		files = append(files, filepath.Join(root, o))
	}
	return root, files
}

// TestRelativeLinksResolve: every relative link in README.md and docs/*.md names a file or
// directory of the repository, and every anchor a heading of its file.
func TestRelativeLinksResolve(t *testing.T) {
	root, files := docPages(t, "README.md", "CHANGELOG.md")
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				dest = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel(root, f), target, rel(root, dest))
					continue
				}
			}
			checked++
			if frag == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			if !anchors(t, dest)[frag] {
				t.Errorf("%s: link %q: no heading of %s has the anchor #%s", rel(root, f), target, rel(root, dest), frag)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("%d relative links found; the pattern finds none", checked)
	}
}

func rel(root, p string) string {
	if r, err := filepath.Rel(root, p); err == nil {
		return r
	}
	return p
}

func TestAnchorIsGitHubs(t *testing.T) {
	for h, want := range map[string]string{
		"Two commands":       "two-commands",
		"Karpenter's values": "karpenters-values",
		"Registration health (no gate: always on, as in Karpenter v1.15)": "registration-health-no-gate-always-on-as-in-karpenter-v115",
		"NodeOverlay": "nodeoverlay",
		"Side by side with Karpenter v1.15 on the local cluster": "side-by-side-with-karpenter-v115-on-the-local-cluster",
	} {
		if got := anchor(h); got != want {
			t.Errorf("anchor(%q) = %q, want %q", h, got, want)
		}
	}
}
