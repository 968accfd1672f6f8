package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/testenv"
)

// runIn is a paragraph's bold run-in heading (**Spot.** …), which the docs name as sections too.
var runIn = regexp.MustCompile(`(?m)^[ \t]*(?:[-*]\s+|\d+\.\s+)?\*\*([^*]+?)\*\*`)

// sectionRef is a reference to a section of a document by its heading, as the docs and the code's
// comments write one: docs/benchmarks.md, "Scale" (whitespace already collapsed to one space).
var sectionRef = regexp.MustCompile(`((?:docs/)?[A-Za-z-]+\.md),? "([^"]+)"`)

// TestSectionReferencesNameAHeading: every `FILE.md, "Heading"` reference in the README, docs/,
// the CHANGELOG and the code's comments and scripts names the beginning of a heading of that
// file (or of a paragraph's bold run-in heading), so that a section renamed or removed cannot leave a reference to nothing behind.
func TestSectionReferencesNameAHeading(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string][]string{}
	headingsOf := func(rel string) []string {
		if h, ok := headings[rel]; ok {
			return h
		}
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			headings[rel] = nil
			return nil
		}
		var hs []string
		text := stripFences(string(b))
		for _, m := range append(heading.FindAllStringSubmatch(text, -1), runIn.FindAllStringSubmatch(text, -1)...) {
			hs = append(hs, strings.NewReplacer("`", "", "*", "").Replace(m[1]))
		}
		headings[rel] = hs
		return hs
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if name := d.Name(); rel != "." && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(path) {
		case ".md", ".go", ".sh", ".yaml", ".txt":
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text := strings.Join(strings.Fields(strings.NewReplacer("//", " ", "#", " ").Replace(string(b))), " ")
		for _, m := range sectionRef.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if !strings.Contains(target, "/") && target != "README.md" && target != "CHANGELOG.md" {
				target = filepath.Join(filepath.Dir(rel), target)
				if _, err := os.Stat(filepath.Join(root, target)); err != nil {
					target = filepath.Join("docs", m[1])
				}
			}
			hs := headingsOf(target)
			if hs == nil {
				continue // not a file of this repository (a file of another project)
			}
			checked++
			want := strings.NewReplacer("`", "", "*", "").Replace(m[2])
			found := false
			for _, h := range hs {
				if strings.HasPrefix(h, want) {
					found = true
					break
				}
			}
			if !found {
				t.Errorf("%s: %s, %q names no heading of %s", rel, m[1], m[2], target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no section reference found: the pattern no longer matches how the docs write one")
	}
}

// stripFences removes fenced code blocks, whose lines may start with # without being headings.
func stripFences(s string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, "```") {
			in = !in
			continue
		}
		if !in {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// workTalk is text about how the work was done rather than about the product: change notes
// dated inside reference pages (they belong in the CHANGELOG), work items and work sessions, and
// paths of one machine.
var workTalk = regexp.MustCompile(`(?i)\b(?:before|since|until) 20\d\d-\d\d-\d\d\b|\bissue #?\d|\bthe issue\b|\bwork items?\b|\bwork(?:ing)? sessions?\b|\bthis session\b|\bfirecracker\b|/work/|/root/go/`)

// TestDocsDescribeTheProduct: the README and docs/ describe the product as it is. A measurement
// carries its date and commit ("measured 2026-12-05 at a41fbe7"); what changed when is the
// CHANGELOG's and git's.
func TestDocsDescribeTheProduct(t *testing.T) {
	root, files := docPages(t, "README.md", filepath.Join("charts", "capstan", "README.md"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if m := workTalk.FindString(line); m != "" {
				rel, _ := filepath.Rel(root, f)
				t.Errorf("%s:%d: %q: say what the product does; dated change notes go in CHANGELOG.md", rel, i+1, strings.TrimSpace(m))
			}
		}
	}
}
