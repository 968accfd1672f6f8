// Command hashvectors writes, into a file of NodePools, the karpenter.sh/nodepool-hash that
// Karpenter itself computes for each (its NodePool.Hash, from the module go.mod pins). Capstan's
// TestHashIsKarpentersValue checks its own hash against those values. It lives in this external
// module, as the suites do: Capstan imports nothing of Karpenter.
//
//	GOTOOLCHAIN=go1.27.3 go run ./hashvectors FILE       # prints each NodePool's name and hash
//	GOTOOLCHAIN=go1.27.3 go run ./hashvectors -w FILE    # writes them into FILE's annotations
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"

	"sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/yaml"
)

// hashLine is the annotation as the file spells it, one per document.
var hashLine = regexp.MustCompile(`karpenter\.sh/nodepool-hash: "[0-9]*"`)

func main() {
	write := flag.Bool("w", false, "write the hashes into the file")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: hashvectors [-w] FILE")
		os.Exit(2)
	}
	path := flag.Arg(0)
	b, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	docs := bytes.Split(b, []byte("\n---\n"))
	for i, doc := range docs {
		np := &v1.NodePool{}
		if err := yaml.UnmarshalStrict(doc, np); err != nil {
			fmt.Fprintf(os.Stderr, "%s: document %d: %v\n", path, i+1, err)
			os.Exit(1)
		}
		h := np.Hash()
		fmt.Printf("%s\t%s\n", np.Name, h)
		if n := len(hashLine.FindAll(doc, -1)); n != 1 {
			fmt.Fprintf(os.Stderr, "%s: NodePool %s: want one %s line, found %d\n", path, np.Name, v1.NodePoolHashAnnotationKey, n)
			os.Exit(1)
		}
		docs[i] = hashLine.ReplaceAll(doc, []byte(fmt.Sprintf("karpenter.sh/nodepool-hash: %q", h)))
	}
	if *write {
		out := strings.Join(func() []string {
			s := make([]string, len(docs))
			for i, d := range docs {
				s[i] = string(d)
			}
			return s
		}(), "\n---\n")
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
