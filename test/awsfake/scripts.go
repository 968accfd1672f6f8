package awsfake

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"
)

// ShellCommands are the simple commands of a bash script in the order bash meets them (those of
// a redirection's process substitution after their command), each as the values of its words,
// read with mvdan.cc/sh's bash parser. User data's commands are plain calls, so a word that would
// expand anything at run time — a parameter, a command, process or arithmetic substitution, an
// unquoted glob, brace or tilde — is an error, as is an assignment before a command.
func ShellCommands(script string) ([][]string, error) {
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(script), "user-data")
	if err != nil {
		return nil, fmt.Errorf("parsing as bash: %w", err)
	}
	var cmds [][]string
	var werr error
	syntax.Walk(f, func(n syntax.Node) bool {
		call, ok := n.(*syntax.CallExpr)
		if !ok || werr != nil {
			return werr == nil
		}
		if len(call.Assigns) > 0 {
			werr = fmt.Errorf("%s: an assignment before a command", call.Pos())
			return false
		}
		var words []string
		for _, w := range call.Args {
			v, err := literalWord(w)
			if err != nil {
				werr = err
				return false
			}
			words = append(words, v)
		}
		cmds = append(cmds, words)
		return true
	})
	return cmds, werr
}

// literalWord is the value of a word made only of literal text and quotes.
func literalWord(w *syntax.Word) (string, error) {
	for _, p := range w.Parts {
		switch p := p.(type) {
		case *syntax.Lit:
			if strings.ContainsAny(p.Value, "*?[{") || strings.HasPrefix(p.Value, "~") {
				return "", fmt.Errorf("%s: unquoted %q would expand", p.Pos(), p.Value)
			}
		case *syntax.SglQuoted:
		case *syntax.DblQuoted:
			for _, q := range p.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return "", fmt.Errorf("%s: a double-quoted expansion", q.Pos())
				}
			}
		default:
			return "", fmt.Errorf("%s: an expansion (%T)", p.Pos(), p)
		}
	}
	return expand.Literal(nil, w)
}

// psSingleQuotes are the characters PowerShell's language specification takes for a single
// quote (single-quote-character): the apostrophe and four typographic quotes.
const psSingleQuotes = "'\u2018\u2019\u201a\u201b"

// PowerShellArg is the value of the single-quoted argument after the parameter name (such as
// "-EKSClusterName") in a PowerShell command line, read as the language specification reads a
// verbatim string: it starts and ends with a single-quote character, and two of them inside
// stand for the second. ok is false when the parameter is missing or its argument is not one
// complete single-quoted string.
func PowerShellArg(line, name string) (string, bool) {
	_, rest, ok := strings.Cut(line, " "+name+" ")
	if !ok {
		return "", false
	}
	v, _, err := PowerShellString(rest)
	return v, err == nil
}

// PowerShellString reads the single-quoted string that s starts with and returns its value and
// what follows it.
func PowerShellString(s string) (value, rest string, err error) {
	quote := func(i int) (int, bool) {
		r, size := utf8.DecodeRuneInString(s[i:])
		return size, r != utf8.RuneError && strings.ContainsRune(psSingleQuotes, r)
	}
	size, ok := 0, false
	if s != "" {
		size, ok = quote(0)
	}
	if !ok {
		return "", s, errors.New("not a single-quoted string")
	}
	var b strings.Builder
	for i := size; i < len(s); {
		n, q := quote(i)
		if !q {
			b.WriteString(s[i : i+n])
			i += n
			continue
		}
		if i+n < len(s) {
			if m, q2 := quote(i + n); q2 {
				b.WriteString(s[i+n : i+n+m])
				i += n + m
				continue
			}
		}
		return b.String(), s[i+n:], nil
	}
	return "", s, errors.New("an unterminated single-quoted string")
}
