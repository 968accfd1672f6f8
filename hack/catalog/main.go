// Command catalog regenerates the embedded EC2 catalog (internal/catalog/data) from a file of
// instance-type facts, one JSON object per line: it checks that every line decodes as a catalog
// entry and converts to an instance type, then writes the file gzip-compressed with no name or
// time in its header, so the same source always gives the same bytes.
//
//	go run ./hack/catalog -in FILE -out internal/catalog/data/ec2-instance-types.jsonl.gz
package main

import (
	"bytes"
	"compress/gzip"
	"flag"
	"fmt"
	"os"

	"capstan.dev/capstan/internal/catalog"
)

func main() {
	in := flag.String("in", "", "the instance-type facts, one JSON object per line")
	out := flag.String("out", "internal/catalog/data/ec2-instance-types.jsonl.gz", "the embedded catalog to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "catalog:", err)
		os.Exit(1)
	}
}

// run checks the source and writes the compressed catalog; on an error nothing is written.
func run(in, out string) error {
	if in == "" {
		return fmt.Errorf("-in: the instance-type facts file is required")
	}
	src, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	entries, err := catalog.Decode(bytes.NewReader(src))
	if err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	if len(entries) == 0 {
		return fmt.Errorf("%s: no instance type", in)
	}
	if _, err := catalog.InstanceTypes(entries, catalog.Options{Zones: []string{"zone-a"}, Spot: true}); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(src); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}
