package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"capstan.dev/capstan/internal/catalog"
)

// The embedded catalog regenerates from its own lines to the same content, twice to the same
// bytes; a source line that is not an entry is refused naming its line, and nothing is written.
func TestRegeneratesTheEmbeddedCatalog(t *testing.T) {
	entries, err := catalog.Load()
	if err != nil {
		t.Fatal(err)
	}
	embedded, err := os.ReadFile("../../internal/catalog/data/ec2-instance-types.jsonl.gz")
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(embedded))
	if err != nil {
		t.Fatal(err)
	}
	lines, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "types.jsonl")
	if err := os.WriteFile(src, lines, 0o644); err != nil {
		t.Fatal(err)
	}
	var outs [2][]byte
	for i := range outs {
		out := filepath.Join(dir, "out.gz")
		if err := run(src, out); err != nil {
			t.Fatal(err)
		}
		if outs[i], err = os.ReadFile(out); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Error("the same source gave different bytes")
	}
	zr, err = gzip.NewReader(bytes.NewReader(outs[0]))
	if err != nil {
		t.Fatal(err)
	}
	back, err := catalog.Decode(zr)
	if err != nil || len(back) != len(entries) {
		t.Fatalf("regenerated catalog: %d entries, %v; want %d", len(back), err, len(entries))
	}

	bad := filepath.Join(dir, "bad.jsonl")
	first := lines[:bytes.IndexByte(lines, '\n')+1]
	if err := os.WriteFile(bad, append(append([]byte{}, first...), "{\"name\": 3}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "bad.gz")
	if err := run(bad, out); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a bad second line: error %v, want one naming line 2", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a bad source wrote %s", out)
	}
}
