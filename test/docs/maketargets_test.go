package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/testenv"
)

var (
	// codeSpan is a Markdown code block or inline code span.
	codeSpan = regexp.MustCompile("(?s)```.*?```|`[^`\n]+`")
	// makeCall is a make command in code: `make run`, `make test`, `RUNS=3 make conformance`.
	makeCall = regexp.MustCompile(`(?:^|[\s;(&|])make ((?:-[-a-z]+ )*)([a-z][a-z0-9-]*)`)
	// makeTarget is a rule's target at the start of a Makefile line.
	makeTarget = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)
)

// missingTargets are the make targets the Markdown text names in code that targets lacks.
func missingTargets(text string, targets map[string]bool) []string {
	var out []string
	for _, span := range codeSpan.FindAllString(text, -1) {
		for _, m := range makeCall.FindAllStringSubmatch(span, -1) {
			if !targets[m[2]] && !slices.Contains(out, m[2]) {
				out = append(out, m[2])
			}
		}
	}
	return out
}

// Every make target the README and docs/ name in code exists in the Makefile; and the check
// itself finds a target that does not.
func TestDocsNameOnlyMakeTargetsThatExist(t *testing.T) {
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(RepoFile(t, "Makefile"), -1) {
		targets[m[1]] = true
	}
	if !targets["test"] || !targets["run"] {
		t.Fatalf("Makefile targets %v: want at least test and run", targets)
	}
	if got := missingTargets("Run `make run`, then:\n```sh\nRUNS=3 make conformnce\n```\nand `make test`; make sure.", targets); !slices.Equal(got, []string{"conformnce"}) {
		t.Fatalf("the check found %v in a page naming make conformnce, want exactly it", got)
	}
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md"))
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if missing := missingTargets(string(b), targets); len(missing) > 0 {
			t.Errorf("%s names make target(s) the Makefile lacks: %s", strings.TrimPrefix(p, root+"/"), strings.Join(missing, ", "))
		}
	}
}
