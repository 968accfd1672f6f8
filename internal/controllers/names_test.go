// Package controllers holds Capstan's controllers, one per package; this test holds their names
// to their paths.
package controllers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// nameFunc is a controller's Name method returning a literal.
var nameFunc = regexp.MustCompile(`func \([a-z]+ \*[A-Za-z]+\) Name\(\) string \{ return "([a-z.]+)" \}`)

// karpenterNames are the controllers named as Karpenter names them, whose names users' log
// queries and dashboards know: the provisioner (package provisioning) and the NodeClaim
// disruption marker (package nodeclaim/disruptionconditions).
var karpenterNames = map[string]string{"provisioning": "provisioner", "nodeclaim/disruptionconditions": "nodeclaim.disruption"}

// Every controller's name (its log key and metrics label) is its package path under
// internal/controllers, dots for slashes (a second controller of a package adds its own part),
// except the names Karpenter gives its own.
func TestControllerNamesFollowTheirPaths(t *testing.T) {
	found := 0
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range nameFunc.FindAllStringSubmatch(string(b), -1) {
			found++
			dir := filepath.ToSlash(filepath.Dir(path))
			want := strings.ReplaceAll(dir, "/", ".")
			if k, ok := karpenterNames[dir]; ok {
				want = k
			}
			if m[1] != want && !strings.HasPrefix(m[1], want+".") {
				t.Errorf("%s: controller named %q, want %q (its path)", path, m[1], want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 15 {
		t.Fatalf("%d controller names found; the pattern finds none", found)
	}
}
