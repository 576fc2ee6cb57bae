package config

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// This file reads the YAML reader's scalars: plain, single-quoted and
// double-quoted (with their escapes), and what a scalar means as a
// boolean.

// scalar reads a scalar at pos; flow is whether it is inside a flow
// collection.
func (p *yparser) scalar(flow bool, s *yschema) *ynode {
	if p.eof() {
		p.fail("a value was expected")
	}
	switch c := p.src[p.pos]; c {
	case '"', '\'':
		line := p.line
		v := p.quoted()
		n := p.node(yScalar, line, s)
		n.value, n.quoted = v, true
		return n
	case '&', '*':
		p.fail("anchors and aliases (%c) are not supported", c)
	case '!':
		p.fail("tags (!) are not supported")
	case '|', '>':
		p.fail("block scalars (%c) are not supported: write the value on one line", c)
	case '%', '@', '`', '[', ']', '{', '}', ',':
		p.fail("a value cannot start with %c here", c)
	case '?':
		if r := p.pos + 1; flow || r == len(p.src) || strings.IndexByte(" \t\r\n", p.src[r]) >= 0 {
			p.fail("complex keys (?) are not supported")
		}
	case '#':
		p.fail("a value was expected, not a comment")
	case ':':
		p.fail("a value or key cannot start with :")
	}
	line := p.line
	v := p.plain(flow)
	kind := yScalar
	switch v {
	case "", "~", "null", "Null", "NULL":
		kind = yNull
	}
	n := p.node(kind, line, s)
	n.value = v
	return n
}

// plain reads a plain scalar, which ends at ": ", " #", the line's end,
// and in a flow collection at , [ ] { } and ":" before one of them.
func (p *yparser) plain(flow bool) string {
	start := p.pos
	end := p.pos
	for !p.eof() {
		c := p.src[p.pos]
		if c == '\n' || c == '\r' {
			break
		}
		if c == '\t' {
			p.tab()
		}
		if c == ':' {
			r := p.pos + 1
			if r == len(p.src) || strings.IndexByte(" \t\r\n", p.src[r]) >= 0 {
				break
			}
			if flow && strings.IndexByte(",[]{}", p.src[r]) >= 0 {
				p.fail("a : before %c: put a space after it, or quote the text", p.src[r])
			}
		}
		if c == '#' && p.pos > start && (p.src[p.pos-1] == ' ' || p.src[p.pos-1] == '\t') {
			break
		}
		if flow && strings.IndexByte(",[]{}", c) >= 0 {
			break
		}
		p.pos++
		if c != ' ' && c != '\t' {
			end = p.pos
		}
	}
	if flow && p.pos == start && !p.eof() && strings.IndexByte("[]{}", p.src[p.pos]) >= 0 {
		p.fail("unexpected %c", p.src[p.pos])
	}
	p.pos = end
	if c := p.src[start:end]; strings.HasPrefix(c, "- ") || c == "-" && !flow {
		p.fail("a sequence entry where a value was expected")
	}
	return p.src[start:end]
}

// quoted reads a single- or double-quoted scalar, which must end on its
// line.
func (p *yparser) quoted() string {
	q := p.src[p.pos]
	p.pos++
	start := p.pos
	var b []byte // nil while the text needs no unescaping
	for {
		if p.eof() || p.src[p.pos] == '\n' || p.src[p.pos] == '\r' {
			p.fail("a quoted scalar must end on its line")
		}
		c := p.src[p.pos]
		switch {
		case c == q && q == '\'' && p.pos+1 < len(p.src) && p.src[p.pos+1] == '\'':
			b = append(b[:len(b):len(b)], p.src[start:p.pos+1]...)
			p.pos += 2
			start = p.pos
			continue
		case c == q:
			s := p.src[start:p.pos]
			p.pos++
			if b != nil {
				return string(append(b, s...))
			}
			return s
		case c == '\\' && q == '"':
			b = append(b[:len(b):len(b)], p.src[start:p.pos]...)
			b = p.escape(b)
			start = p.pos
			continue
		}
		p.pos++
	}
}

// escape appends the character of the escape at pos (a backslash in a
// double-quoted scalar), and moves past it.
func (p *yparser) escape(b []byte) []byte {
	p.pos++
	if p.eof() || p.src[p.pos] == '\n' || p.src[p.pos] == '\r' {
		p.fail("a quoted scalar must end on its line")
	}
	c := p.src[p.pos]
	p.pos++
	if s, ok := escapes[c]; ok {
		return append(b, s...)
	}
	width := escapeWidths[c]
	if width == 0 || p.pos+width > len(p.src) {
		p.fail("unknown escape \\%c", c)
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+width], 16, 32)
	if err != nil || v > utf8.MaxRune || v >= 0xd800 && v < 0xe000 {
		p.fail("bad escape \\%c%s", c, p.src[p.pos:p.pos+width])
	}
	p.pos += width
	return utf8.AppendRune(b, rune(v))
}

// escapes are the one-character escapes of double-quoted scalars, and
// escapeWidths the hex digits that \x, \u and \U take.
var (
	escapes      = map[byte]string{'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", '\t': "\t", 'n': "\n", 'v': "\v", 'f': "\f", 'r': "\r", 'e': "\x1b", ' ': " ", '"': "\"", '\\': "\\", 'N': "\u0085", '_': "\u00a0", 'L': "\u2028", 'P': "\u2029"}
	escapeWidths = map[byte]int{'x': 2, 'u': 4, 'U': 8}
)

// boolValue reads a boolean scalar as yaml.v3 does when it decodes one
// into a bool: true and false in any of their cases, and YAML 1.1's
// yes, no, on, off, y and n.
func boolValue(n *ynode) (bool, bool) {
	if !n.quoted {
		switch n.value {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	}
	style := yaml.Style(0)
	if n.quoted {
		style = yaml.DoubleQuotedStyle
	}
	var b bool
	err := (&yaml.Node{Kind: yaml.ScalarNode, Style: style, Value: n.value}).Decode(&b)
	return b, err == nil
}
