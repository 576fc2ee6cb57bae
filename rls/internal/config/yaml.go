package config

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// This file reads the YAML that configurations are written in, into a
// compact tree that costs a small multiple of its bytes: a node is 48
// bytes, and a scalar's text is the file's own bytes wherever it needs no
// unescaping. (A general YAML library's tree costs about 25 times a
// configuration's bytes, and over 90 times for dense input such as
// [1,1,1,…], before anything is checked.)
//
// It reads the part of YAML that configurations use: block mappings and
// sequences, flow mappings and sequences (over several lines too), plain,
// single-quoted and double-quoted scalars on one line, comments, and one
// document, with an optional --- before it. What it does not read is an
// error that names the feature and the line: anchors, aliases and tags,
// block scalars (| and >), scalars that run over several lines, complex
// keys (?), directives, and a second document. A file it reads gives the
// tree that yaml.v3 gives (a fuzz test holds the two together), so
// configurations load as envoyproxy/ratelimit's YAML library reads them.

// ykind is a node's kind.
type ykind uint8

const (
	yScalar ykind = iota + 1
	yNull         // a plain null: empty, ~, null, Null or NULL
	yMap          // children: key, value, key, value, …
	ySeq
	yWire // a push's descriptor's children, still its bytes (value): see xdsReader
)

// ynode is one node of a document.
type ynode struct {
	value       string // a scalar's text, unescaped
	first, next *ynode // first child; next sibling
	line        int32
	kind        ykind
	quoted      bool // a quoted scalar: never null or a boolean
}

// yamlMaxDepth bounds the nesting of collections that a document may
// hold, so that reading one needs a bounded stack.
const yamlMaxDepth = 200

// yparser reads one document.
type yparser struct {
	src   string
	pos   int // the next byte
	line  int // of pos, from 1
	lineS int // the offset where pos's line starts
	depth int
	nodes []ynode // the current block of nodes, allocated in chunks
	count int     // nodes made
	max   int     // the most nodes the document may make
	pace  func()  // Options.Pace, called every 256 nodes
}

// yerr is a syntax error at a line.
type yerr struct {
	line int
	msg  string
}

func (e *yerr) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// parseYAML reads src's one document; root is nil for a document that
// holds nothing. maxNodes bounds the nodes it may make: past them it
// stops, so that no input costs more than that bound.
func parseYAML(src string, maxNodes int, schema *yschema, pace func()) (root *ynode, err error) {
	if !utf8.ValidString(src) {
		return nil, &yerr{1, "the file is not valid UTF-8"}
	}
	line := 1
	for i := 0; i < len(src); {
		c := src[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '\n':
				line++
			case c == '\r' && (i+1 == len(src) || src[i+1] != '\n'):
				return nil, &yerr{line, "a carriage return that is not before a line feed"}
			case c < 0x20 && c != '\t' && c != '\r' || c == 0x7f:
				return nil, &yerr{line, fmt.Sprintf("control character %#x", c)}
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(src[i:])
		if r >= 0x80 && r < 0xa0 && r != 0x85 || r == 0xfffe || r == 0xffff || r == 0xfeff && i > 0 {
			return nil, &yerr{line, fmt.Sprintf("character %U cannot be in YAML", r)}
		}
		i += w
	}
	src = strings.TrimPrefix(src, "\ufeff")
	p := &yparser{src: src, line: 1, max: maxNodes, pace: pace}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*yerr)
			if !ok {
				panic(r)
			}
			root, err = nil, e
		}
	}()
	p.skipBlank()
	started := false
	if p.atMarker("---") {
		started = true
		p.pos += 3
		p.skipSpaces()
		if !p.eol() {
			root = p.inline(schema)
			p.endLine()
		}
		p.skipBlank()
	}
	if root == nil && !p.eof() && !p.atMarker("...") && !p.atMarker("---") {
		root = p.block(-1, schema)
	}
	p.skipBlank()
	if root == nil && !started && !p.eof() {
		p.fail("a document end (...) with no document")
	}
	for p.atMarker("...") || p.atMarker("---") {
		p.pos += 3
		p.skipSpaces()
		p.endLine()
		p.skipBlank()
	}
	if !p.eof() {
		p.fail("a second document, or text after the first: a file holds one document")
	}
	return root, nil
}

func (p *yparser) fail(format string, args ...any) {
	panic(&yerr{p.line, fmt.Sprintf(format, args...)})
}

// node makes a node.
func (p *yparser) node(kind ykind, line int, s *yschema) *ynode {
	s.check(p, kind)
	if p.count++; p.count > p.max {
		p.fail("more than %d YAML nodes: the configuration is too large", p.max)
	}
	if len(p.nodes) == 0 {
		p.nodes = make([]ynode, min(256, p.max))
		if p.pace != nil {
			p.pace()
		}
	}
	n := &p.nodes[0]
	p.nodes = p.nodes[1:]
	n.kind, n.line = kind, int32(line)
	return n
}

func (p *yparser) eof() bool { return p.pos >= len(p.src) }

// eol reports whether pos is at the end of its line's content: a line
// break, the end, or a comment.
func (p *yparser) eol() bool {
	return p.eof() || p.src[p.pos] == '\n' || p.src[p.pos] == '\r' || p.src[p.pos] == '#'
}

// col is pos's column, from 0.
func (p *yparser) col() int { return p.pos - p.lineS }

func (p *yparser) skipSpaces() {
	for !p.eof() && p.src[p.pos] == ' ' {
		p.pos++
	}
	if !p.eof() && p.src[p.pos] == '\t' {
		p.tab()
	}
}

// tab fails at a tab: YAML lets tabs separate some tokens and not
// others, and the reader takes them only in quoted text and comments.
func (p *yparser) tab() {
	p.fail("a tab: use spaces (tabs are read only in quoted text and comments)")
}

// newline moves past the line break at pos.
func (p *yparser) newline() {
	if !p.eof() && p.src[p.pos] == '\r' {
		p.pos++
	}
	if !p.eof() && p.src[p.pos] == '\n' {
		p.pos++
		p.line++
		p.lineS = p.pos
	}
}

// endLine moves past the rest of a line whose content is over: spaces,
// a comment, the line break.
func (p *yparser) endLine() {
	p.skipSpaces()
	if !p.eof() && p.src[p.pos] == '#' {
		if p.pos > p.lineS && p.src[p.pos-1] != ' ' && p.src[p.pos-1] != '\t' {
			p.fail("a # that starts a comment needs a space before it")
		}
		for !p.eof() && p.src[p.pos] != '\n' {
			p.pos++
		}
	}
	if !p.eof() && p.src[p.pos] != '\n' && p.src[p.pos] != '\r' {
		p.fail("unexpected %q after a value", p.rest())
	}
	p.newline()
}

// rest is what is left of pos's line, shortened for an error.
func (p *yparser) rest() string {
	end := strings.IndexByte(p.src[p.pos:], '\n')
	if end < 0 {
		end = len(p.src) - p.pos
	}
	s := strings.TrimRight(p.src[p.pos:p.pos+end], "\r")
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// skipBlank moves pos to the first content of the next line that has
// any, past blank and comment lines; pos is then at that content's
// column, or at the end.
func (p *yparser) skipBlank() {
	for !p.eof() {
		for !p.eof() && p.src[p.pos] == ' ' {
			p.pos++
		}
		if p.eof() {
			return
		}
		switch p.src[p.pos] {
		case '\t':
			p.tab()
		case '#', '\r', '\n':
			p.endLine()
			continue
		}
		return
	}
}

// atMarker reports whether pos starts a line with m (--- or ...) that
// ends there or before a space.
func (p *yparser) atMarker(m string) bool {
	if p.col() != 0 || !strings.HasPrefix(p.src[p.pos:], m) {
		return false
	}
	r := p.pos + 3
	return r == len(p.src) || strings.IndexByte(" \t\r\n", p.src[r]) >= 0
}

// block reads the block node whose first content is at pos, more
// indented than parent.
func (p *yparser) block(parent int, s *yschema) *ynode {
	if p.depth++; p.depth > yamlMaxDepth {
		p.fail("nested deeper than %d levels", yamlMaxDepth)
	}
	defer func() { p.depth-- }()
	ind := p.col()
	switch {
	case p.seqEntry():
		return p.blockSeq(ind, s)
	case p.mapKeyAhead():
		return p.blockMap(ind, s)
	}
	n := p.inline(s)
	p.endLine()
	p.skipBlank()
	if !p.eof() && p.col() > parent && !p.atMarker("---") && !p.atMarker("...") {
		p.fail("a scalar over several lines, or bad indentation")
	}
	return n
}

// seqEntry reports whether pos is at a block sequence's "-".
func (p *yparser) seqEntry() bool {
	if p.eof() || p.src[p.pos] != '-' {
		return false
	}
	r := p.pos + 1
	if r < len(p.src) && p.src[r] == '\t' {
		p.tab()
	}
	return r == len(p.src) || strings.IndexByte(" \r\n", p.src[r]) >= 0
}

// blockSeq reads a block sequence whose "-" are at column ind.
func (p *yparser) blockSeq(ind int, s *yschema) *ynode {
	seq := p.node(ySeq, p.line, s)
	var last *ynode
	for !p.eof() && p.col() == ind && p.seqEntry() && !p.atMarker("---") {
		line := p.line
		p.pos++
		p.skipSpaces()
		var item *ynode
		if p.eol() {
			p.endLine()
			p.skipBlank()
			if !p.eof() && p.col() > ind && !p.atMarker("---") && !p.atMarker("...") {
				item = p.block(ind, s.itemsOf())
			} else {
				item = p.node(yNull, line, s.itemsOf())
			}
		} else {
			item = p.block(ind, s.itemsOf())
		}
		if last == nil {
			seq.first = item
		} else {
			last.next = item
		}
		last = item
		p.skipBlank()
	}
	p.checkDedent(ind)
	return seq
}

// checkDedent fails if the next content is indented past ind though
// the collection at ind has ended.
func (p *yparser) checkDedent(ind int) {
	if !p.eof() && p.col() > ind {
		p.fail("bad indentation: %q", p.rest())
	}
}

// mapKeyAhead reports whether pos starts a block mapping's entry: a key,
// then ":" before a space or the line's end.
func (p *yparser) mapKeyAhead() bool {
	save := *p
	defer func() { recover(); *p = save }() // a key that does not read is no key
	switch c := p.src[p.pos]; c {
	case '"', '\'':
		p.quoted()
	case '[', '{', '&', '*', '!', '|', '>', '%', '@', '`', '#', '?':
		return false
	default:
		p.plain(false)
	}
	p.skipSpaces()
	return p.mappingColon()
}

// mappingColon reports whether pos is at a ":" before a space or the
// line's end.
func (p *yparser) mappingColon() bool {
	if p.eof() || p.src[p.pos] != ':' {
		return false
	}
	r := p.pos + 1
	return r == len(p.src) || strings.IndexByte(" \t\r\n", p.src[r]) >= 0
}

// blockMap reads a block mapping whose keys are at column ind.
func (p *yparser) blockMap(ind int, s *yschema) *ynode {
	m := p.node(yMap, p.line, s)
	var last *ynode
	add := func(n *ynode) {
		if last == nil {
			m.first = n
		} else {
			last.next = n
		}
		last = n
	}
	for !p.eof() && p.col() == ind && !p.atMarker("---") && !p.atMarker("...") {
		if p.seqEntry() {
			p.fail("a sequence entry where a mapping key was expected")
		}
		key := p.scalar(false, keySchema)
		vs := s.field(p, key.value)
		p.skipSpaces()
		if !p.mappingColon() {
			p.fail("expected \": \" after the key %q", key.value)
		}
		line := p.line
		p.pos++
		p.skipSpaces()
		add(key)
		if !p.eol() {
			v := p.inline(vs)
			p.endLine()
			add(v)
			p.skipBlank()
			if !p.eof() && p.col() > ind {
				p.fail("a scalar over several lines, or bad indentation: %q", p.rest())
			}
			continue
		}
		p.endLine()
		p.skipBlank()
		switch {
		case !p.eof() && p.col() > ind && !p.atMarker("---") && !p.atMarker("..."):
			add(p.block(ind, vs))
		case !p.eof() && p.col() == ind && p.seqEntry():
			add(p.blockSeq(ind, vs)) // a sequence may sit at its key's indentation
		default:
			add(p.node(yNull, line, vs))
		}
		p.skipBlank()
	}
	p.checkDedent(ind)
	return m
}

// inline reads a node that starts at pos and is written on its line (a
// flow collection may run over more): a scalar or a flow collection.
func (p *yparser) inline(s *yschema) *ynode {
	switch p.src[p.pos] {
	case '[', '{':
		return p.flow(s)
	}
	n := p.scalar(false, s)
	p.skipSpaces()
	if p.mappingColon() {
		p.fail("a mapping inside a value on one line: quote the value, or put the mapping on lines of its own")
	}
	return n
}
