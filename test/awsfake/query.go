package awsfake

import (
	"encoding/xml"
	"net/url"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// form is a query-protocol request body (EC2's and IAM's): flat keys such as
// "LaunchTemplateConfigs.1.Overrides.2.InstanceType", read through a prefix.
type form struct {
	values url.Values
	prefix string
}

func newForm(v url.Values) form { return form{values: v} }

// Str is the value at key (under the form's prefix), or "".
func (f form) Str(key string) string { return f.values.Get(f.prefix + key) }

// Has reports whether any key starts with key.
func (f form) Has(key string) bool {
	p := f.prefix + key
	for k := range f.values {
		if k == p || strings.HasPrefix(k, p+".") {
			return true
		}
	}
	return false
}

// Sub is the form under key: Sub("Filter.1").Str("Name") reads "Filter.1.Name".
func (f form) Sub(key string) form { return form{values: f.values, prefix: f.prefix + key + "."} }

// Indices are the sorted N of every "key.N" or "key.N.…".
func (f form) Indices(key string) []int {
	p := f.prefix + key + "."
	seen := map[int]bool{}
	for k := range f.values {
		rest, ok := strings.CutPrefix(k, p)
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ".")
		if i, err := strconv.Atoi(n); err == nil {
			seen[i] = true
		}
	}
	out := make([]int, 0, len(seen))
	for i := range seen {
		out = append(out, i)
	}
	sort.Ints(out)
	return out
}

// Each is the sub-form of every "key.N".
func (f form) Each(key string) []form {
	var out []form
	for _, i := range f.Indices(key) {
		out = append(out, f.Sub(key+"."+strconv.Itoa(i)))
	}
	return out
}

// List is the values of "key.N".
func (f form) List(key string) []string {
	var out []string
	for _, i := range f.Indices(key) {
		out = append(out, f.Str(key+"."+strconv.Itoa(i)))
	}
	return out
}

// filter is one EC2 Filter.N: a name and the values any of which must match.
type filter struct {
	Name   string
	Values []string
}

func (f form) filters() []filter {
	var out []filter
	for _, s := range f.Each("Filter") {
		out = append(out, filter{Name: s.Str("Name"), Values: s.List("Value")})
	}
	return out
}

// knownFilters refuses, as EC2 does, a filter name the call does not know: tag filters
// ("tag:<key>", "tag-key", "tag-value") and the names given. EC2 answers InvalidParameterValue
// where a lenient fake would answer an empty list, which a caller would take for "none".
func knownFilters(call string, fs []filter, names ...string) *apiError {
	for _, f := range fs {
		if strings.HasPrefix(f.Name, "tag:") || f.Name == "tag-key" || f.Name == "tag-value" || slices.Contains(names, f.Name) {
			continue
		}
		return errorf("InvalidParameterValue", "The filter '%s' is invalid (%s)", f.Name, call)
	}
	return nil
}

// attributes answers a filter name with the resource's values for it (nil when it has none).
type attributes func(name string) []string

// matchFilters reports whether every filter matches one of the resource's values, with EC2's
// "*" and "?" wildcards.
func matchFilters(fs []filter, attrs attributes) bool {
	for _, f := range fs {
		have := attrs(f.Name)
		ok := false
		for _, want := range f.Values {
			for _, h := range have {
				if m, _ := path.Match(want, h); m || want == h {
					ok = true
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// tagAttributes answers "tag:<key>" and "tag-key" from tags.
func tagAttributes(tags map[string]string, name string) ([]string, bool) {
	if k, ok := strings.CutPrefix(name, "tag:"); ok {
		if v, has := tags[k]; has {
			return []string{v}, true
		}
		return nil, true
	}
	if name == "tag-key" {
		var keys []string
		for k := range tags {
			keys = append(keys, k)
		}
		return keys, true
	}
	return nil, false
}

// el is an XML element of a response: text or children.
type el struct {
	name string
	text string
	kids []*el
}

// E is an element with children; nil children are skipped.
func E(name string, kids ...*el) *el {
	e := &el{name: name}
	for _, k := range kids {
		if k != nil {
			e.kids = append(e.kids, k)
		}
	}
	return e
}

// T is an element with text.
func T(name, text string) *el { return &el{name: name, text: text} }

// Opt is T, or nothing when text is empty.
func Opt(name, text string) *el {
	if text == "" {
		return nil
	}
	return T(name, text)
}

// Set is EC2's list: each child wrapped in <item>.
func Set(name string, items []*el) *el {
	e := &el{name: name}
	for _, it := range items {
		it.name = "item"
		e.kids = append(e.kids, it)
	}
	return e
}

// Members is IAM's list: each child wrapped in <member>.
func Members(name string, items []*el) *el {
	e := &el{name: name}
	for _, it := range items {
		it.name = "member"
		e.kids = append(e.kids, it)
	}
	return e
}

// tagSet renders tags as EC2's tagSet.
func tagSet(tags map[string]string) *el {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var items []*el
	for _, k := range keys {
		items = append(items, E("", T("key", k), T("value", tags[k])))
	}
	return Set("tagSet", items)
}

func (e *el) write(b *strings.Builder) {
	b.WriteString("<" + e.name + ">")
	if len(e.kids) == 0 {
		_ = xml.EscapeText(b, []byte(e.text))
	}
	for _, k := range e.kids {
		k.write(b)
	}
	b.WriteString("</" + e.name + ">")
}

// render is the document with root's name carrying xmlns.
func render(root *el, xmlns string) string {
	var b strings.Builder
	b.WriteString(xml.Header)
	b.WriteString("<" + root.name + ` xmlns="` + xmlns + `">`)
	for _, k := range root.kids {
		k.write(&b)
	}
	b.WriteString("</" + root.name + ">")
	return b.String()
}

func boolText(b bool) string { return strconv.FormatBool(b) }
