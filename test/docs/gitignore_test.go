package docs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/testenv"
)

// `go build ./cmd/X` or `go build ./hack/X` at the root writes a binary named X there: each is
// in .gitignore, so a build never adds a binary to a commit.
func TestRootBuildOutputsAreIgnored(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	ignored := map[string]bool{}
	for _, line := range strings.Split(RepoFile(t, ".gitignore"), "\n") {
		ignored[strings.TrimSpace(line)] = true
	}
	mains := 0
	for _, dir := range []string{"cmd", "hack"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module (the pinned tools): not built at the root
				}
				return nil
			}
			if filepath.Ext(path) != ".go" || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if !strings.Contains(string(b), "\npackage main\n") && !strings.HasPrefix(string(b), "package main\n") {
				return nil
			}
			mains++
			if name := filepath.Base(filepath.Dir(path)); !ignored["/"+name] {
				t.Errorf("%s builds a binary %s at the root, which .gitignore does not name (/%s)", filepath.Dir(path), name, name)
			}
			return filepath.SkipDir
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if mains < 5 {
		t.Fatalf("%d main packages found; the walk finds none", mains)
	}
}
