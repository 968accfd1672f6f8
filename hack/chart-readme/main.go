// Command chart-readme writes a chart's README from its values.yaml: every key, its default and
// the description its `# --` comment gives, in the file's order. make generate runs it for
// charts/capstan, and make verify fails when the README is stale.
//
//	go run ./hack/chart-readme charts/capstan
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: chart-readme CHART_DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "chart-readme:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	chart, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		return err
	}
	var meta struct {
		Name        string `yaml:"name"`
		Description string `yaml:"description"`
	}
	if err := yaml.Unmarshal(chart, &meta); err != nil {
		return fmt.Errorf("reading Chart.yaml: %w", err)
	}
	rows, err := document(values)
	if err != nil {
		return fmt.Errorf("values.yaml: %w", err)
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", meta.Name, strings.TrimSpace(meta.Description))
	fmt.Fprintf(&b, "Written from `values.yaml` by `hack/chart-readme` (`make generate`); do not edit. How each key\n")
	fmt.Fprintf(&b, "relates to Karpenter's chart of the same name is in docs/install.md, \"Karpenter's values\".\n\n")
	fmt.Fprintf(&b, "| key | default | description |\n|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", r.key, r.def, r.doc)
	}
	return os.WriteFile(filepath.Join(dir, "README.md"), b.Bytes(), 0o644)
}

// row is one key of the values.
type row struct{ key, def, doc string }

// document lists the keys of a values file: a mapping's keys recursively, a key whose value is
// not a mapping (or an empty one) as one row with its default.
func document(values []byte) ([]row, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(values, &root); err != nil {
		return nil, err
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("not a mapping of keys")
	}
	var rows []row
	var walk func(prefix string, m *yaml.Node) error
	walk = func(prefix string, m *yaml.Node) error {
		for i := 0; i+1 < len(m.Content); i += 2 {
			k, v := m.Content[i], m.Content[i+1]
			key := k.Value
			if prefix != "" {
				key = prefix + "." + k.Value
			}
			doc := description(k.HeadComment)
			// A described mapping none of whose keys is described is one value (a Kubernetes
			// object: affinity, a security context), not keys of the chart's own.
			if v.Kind == yaml.MappingNode && len(v.Content) > 0 && !flow(v) && (doc == "" || described(v)) {
				if doc != "" {
					rows = append(rows, row{key, "", doc})
				}
				if err := walk(key, v); err != nil {
					return err
				}
				continue
			}
			def, err := inline(v)
			if err != nil {
				return fmt.Errorf("%s: %w", key, err)
			}
			rows = append(rows, row{key, def, doc})
		}
		return nil
	}
	return rows, walk("", root.Content[0])
}

// described reports whether any key under the mapping has a `# --` comment.
func described(m *yaml.Node) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if description(m.Content[i].HeadComment) != "" || m.Content[i+1].Kind == yaml.MappingNode && described(m.Content[i+1]) {
			return true
		}
	}
	return false
}

// flow reports whether a mapping is written inline ({a: 1}): it is a default, not keys.
func flow(n *yaml.Node) bool { return n.Style&yaml.FlowStyle != 0 }

// inline is a value as one line of Markdown: `value`, or `{…}` / `[…]` written in flow style.
func inline(v *yaml.Node) (string, error) {
	c := *v
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	c.Style |= yaml.FlowStyle
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		return "", err
	}
	s := strings.TrimSpace(b.String())
	if strings.Contains(s, "\n") {
		s = strings.Join(strings.Fields(s), " ")
	}
	return "`" + strings.ReplaceAll(s, "|", `\|`) + "`", nil
}

// description is a key's `# --` comment, its lines joined.
func description(comment string) string {
	var parts []string
	found := false
	for _, line := range strings.Split(comment, "\n") {
		line = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(line), "#"))
		if strings.HasPrefix(line, "-- ") {
			found, parts = true, []string{strings.TrimPrefix(line, "-- ")}
			continue
		}
		if found && line != "" {
			parts = append(parts, line)
		}
	}
	return strings.ReplaceAll(strings.Join(parts, " "), "|", `\|`)
}
