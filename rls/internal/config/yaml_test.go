package config

import (
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// same reports how n differs from y, yaml.v3's node for the same text,
// or "" where they agree.
func same(n *ynode, y *yaml.Node, where string) string {
	if y.Kind == 0 {
		if n != nil {
			return where + ": yaml.v3 read no document"
		}
		return ""
	}
	if y.Kind == yaml.DocumentNode {
		if len(y.Content) == 0 {
			if n != nil {
				return where + ": yaml.v3 read an empty document"
			}
			return ""
		}
		y = y.Content[0]
		if n == nil && y.Kind == yaml.ScalarNode && y.Tag == "!!null" && y.Value == "" {
			return "" // "---" alone: yaml.v3's document holds a null, the reader's nothing
		}
	}
	if n == nil {
		return where + ": no node where yaml.v3 has one"
	}
	if int(n.line) != y.Line {
		return fmt.Sprintf("%s: line %d, yaml.v3 %d", where, n.line, y.Line)
	}
	var kids []*yaml.Node
	switch y.Kind {
	case yaml.ScalarNode:
		null := y.Tag == "!!null"
		switch {
		case null != (n.kind == yNull), !null && n.kind != yScalar:
			return fmt.Sprintf("%s: kind %d, yaml.v3 %s %q", where, n.kind, y.Tag, y.Value)
		case n.value != y.Value && !(null && n.kind == yNull):
			return fmt.Sprintf("%s: %q, yaml.v3 %q", where, n.value, y.Value)
		case n.quoted != (y.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0):
			return fmt.Sprintf("%s: quoted %v, yaml.v3 style %v", where, n.quoted, y.Style)
		}
		return ""
	case yaml.MappingNode:
		if n.kind != yMap {
			return fmt.Sprintf("%s: kind %d, yaml.v3 a mapping", where, n.kind)
		}
		kids = y.Content
	case yaml.SequenceNode:
		if n.kind != ySeq {
			return fmt.Sprintf("%s: kind %d, yaml.v3 a sequence", where, n.kind)
		}
		kids = y.Content
	default:
		return fmt.Sprintf("%s: yaml.v3 kind %v", where, y.Kind)
	}
	c := n.first
	for i, k := range kids {
		if c == nil {
			return fmt.Sprintf("%s: %d children, yaml.v3 %d", where, i, len(kids))
		}
		if d := same(c, k, fmt.Sprintf("%s/%d", where, i)); d != "" {
			return d
		}
		c = c.next
	}
	if c != nil {
		return fmt.Sprintf("%s: more children than yaml.v3's %d", where, len(kids))
	}
	return ""
}

// yamlSeeds are documents that configurations are written as, and ones
// that the reader must refuse.
var yamlSeeds = []string{
	api,
	"",
	"# only a comment\n",
	"---\ndomain: d\n",
	"--- {domain: d}\n",
	"domain: d\n...\n",
	"domain: d\r\ndescriptors:\r\n  - key: k\r\n",
	"\ufeffdomain: d\n",
	"domain: 'it''s'\nx: \"a\\tb\\u00e9\\x41\\U0001F600\\/\"\n",
	"a: b # c\nd: e#f\n",
	"a:\n- 1\n- 2\nb:\n  - x: 1\n    y: 2\n  -\n  - - n\n",
	"a: [1, 'b', \"c\", {d: e, f}, [], {}]\n",
	"a: {\"k\":v, k2: [x,\n  y], }\n",
	"a: ~\nb: null\nc:\nd: Null\ne: ''\n",
	"a: true\nb: yes\nc: \"true\"\n",
	"a: b: c\n",
	"a: &x 1\nb: *x\n",
	"a: !!str 1\n",
	"a: |\n  text\n",
	"a: multi\n  line\n",
	"a: \"open\n",
	"? a\n: b\n",
	"- a\nb: c\n",
	"a: 1\n  b: 2\n",
	"  a: 1\nb: 2\n",
	"a:\n\tb: 1\n",
	"[1,1,1,1]",
	"domain: [\n",
	"a: 1\n---\nb: 2\n",
	"a: [b: c]\n",
	"{a:1, :b}",
	"a: -\n",
	"a: - b\n",
	"a: x:y\n",
	"key: value   \n  # comment\n",
}

// FuzzYAML: what the reader reads, yaml.v3 reads as the same tree; what
// yaml.v3 refuses, the reader refuses too.
func FuzzYAML(f *testing.F) {
	for _, s := range yamlSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseYAML(s, len(s)+64, nil, nil)
		var y yaml.Node
		yerr := yaml.Unmarshal([]byte(s), &y)
		switch {
		case err != nil:
			return // refusing more than yaml.v3 is allowed: the features left out
		case yerr != nil:
			t.Fatalf("%q: read, but yaml.v3 refuses it: %v", s, yerr)
		}
		if d := same(n, &y, "root"); d != "" {
			t.Fatalf("%q: %s", s, d)
		}
	})
}

// TestYAMLRefuses: the features left out are errors that name them.
func TestYAMLRefuses(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"a: &x 1\n", "anchors"},
		{"a: *x\n", "aliases"},
		{"a: !!str 1\n", "tags"},
		{"a: |\n  x\n", "block scalars"},
		{"a: multi\n  line\n", "several lines"},
		{"a: \"open\n", "end on its line"},
		{"? a\n: b\n", "complex keys"},
		{"a: 1\n---\nb: 2\n", "one document"},
		{"a: [b: c]\n", "flow sequence"},
		{"a:\n\tb: 1\n", "a tab"},
		{"[" + strings.Repeat("1,", 1000) + "1]", "more than 731 YAML nodes"},
		{strings.Repeat("[", 1000), "nested deeper"},
		{"a: \x01\n", "control character"},
		{"a: \xff\n", "UTF-8"},
	} {
		_, err := parseYAML(tc.src, len(tc.src)/3+64, nil, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error with %q", tc.src, err, tc.want)
		}
	}
}
