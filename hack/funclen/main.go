// Command funclen fails when a function of the shipped code is longer than its limit: 100 lines
// anywhere under the given directories, 80 under a directory named with -strict. Test files and
// generated files are not counted. make verify runs it over cmd/ and internal/, strict for the
// AWS provider and the operator's wiring, so that no function grows into one nobody can read.
//
//	go run ./hack/funclen -strict internal/cloudprovider/aws,internal/operator cmd internal
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Default and strict limits, in lines from the func keyword to the closing brace.
const (
	defaultLimit = 100
	strictLimit  = 80
)

// long is one function over its limit.
type long struct {
	pos   token.Position
	name  string
	lines int
	limit int
}

func main() {
	strict := flag.String("strict", "", "comma-separated directories whose functions may have at most 80 lines")
	flag.Parse()
	var strictDirs []string
	for _, d := range strings.Split(*strict, ",") {
		if d != "" {
			strictDirs = append(strictDirs, filepath.Clean(d))
		}
	}
	var found []long
	for _, root := range flag.Args() {
		l, err := scan(root, strictDirs)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		found = append(found, l...)
	}
	sort.Slice(found, func(i, j int) bool { return found[i].lines > found[j].lines })
	for _, f := range found {
		fmt.Fprintf(os.Stderr, "%s:%d: %s has %d lines (at most %d): split it into its steps\n", f.pos.Filename, f.pos.Line, f.name, f.lines, f.limit)
	}
	if len(found) > 0 {
		os.Exit(1)
	}
}

// scan returns the functions under root longer than their limit.
func scan(root string, strictDirs []string) ([]long, error) {
	fset := token.NewFileSet()
	var found []long
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == "testdata" || (strings.HasPrefix(name, ".") && path != root) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		if ast.IsGenerated(f) {
			return nil
		}
		limit := limitFor(path, strictDirs)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()), fset.Position(fn.End())
			if n := end.Line - start.Line + 1; n > limit {
				found = append(found, long{pos: start, name: funcName(fn), lines: n, limit: limit})
			}
		}
		return nil
	})
	return found, err
}

// limitFor is the limit of the file at path.
func limitFor(path string, strictDirs []string) int {
	for _, d := range strictDirs {
		if path == d || strings.HasPrefix(path, d+string(filepath.Separator)) {
			return strictLimit
		}
	}
	return defaultLimit
}

// funcName is a function's name, with its receiver's type for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if ix, ok := t.(*ast.IndexExpr); ok {
		t = ix.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
