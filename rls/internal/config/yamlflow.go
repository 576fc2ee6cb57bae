package config

// This file reads the YAML reader's flow collections, [ … ] and { … },
// which may run over several lines.

// skipFlowSpace moves past spaces, line breaks and comments inside a
// flow collection.
func (p *yparser) skipFlowSpace() {
	for !p.eof() {
		switch p.src[p.pos] {
		case ' ':
			p.pos++
		case '\t':
			p.tab()
		case '\r', '\n':
			p.newline()
		case '#':
			if p.pos > 0 && p.src[p.pos-1] != ' ' && p.src[p.pos-1] != '\t' && p.src[p.pos-1] != '\n' {
				return
			}
			for !p.eof() && p.src[p.pos] != '\n' {
				p.pos++
			}
		default:
			return
		}
	}
}

// flow reads a flow collection, [ … ] or { … }.
func (p *yparser) flow(s *yschema) *ynode {
	if p.depth++; p.depth > yamlMaxDepth {
		p.fail("nested deeper than %d levels", yamlMaxDepth)
	}
	defer func() { p.depth-- }()
	open := p.src[p.pos]
	closer := byte(']')
	kind := ySeq
	if open == '{' {
		closer, kind = '}', yMap
	}
	n := p.node(kind, p.line, s)
	p.pos++
	var last *ynode
	add := func(c *ynode) {
		if last == nil {
			n.first = c
		} else {
			last.next = c
		}
		last = c
	}
	for {
		p.skipFlowSpace()
		if p.eof() {
			p.fail("a flow collection without its %c", closer)
		}
		if p.src[p.pos] == closer {
			p.pos++
			return n
		}
		if kind == yMap {
			item := p.flowItem(keySchema)
			keyLine := p.line
			p.skipFlowSpace()
			vs := s.field(p, item.value)
			add(item)
			if !p.eof() && p.src[p.pos] == ':' {
				if p.line != keyLine {
					p.fail("a : on a line after its key's")
				}
				p.pos++
				p.skipFlowSpace()
				if !p.eof() && (p.src[p.pos] == ',' || p.src[p.pos] == '}') {
					add(p.node(yNull, p.line, vs))
				} else {
					add(p.flowItem(vs))
					p.skipFlowSpace()
				}
			} else {
				add(p.node(yNull, p.line, vs))
			}
		} else {
			item := p.flowItem(s.itemsOf())
			p.skipFlowSpace()
			if !p.eof() && p.src[p.pos] == ':' {
				p.fail("a mapping entry inside a flow sequence: write it as {key: value}")
			}
			add(item)
		}
		if p.eof() {
			p.fail("a flow collection without its %c", closer)
		}
		switch p.src[p.pos] {
		case ',':
			p.pos++
		case closer:
		default:
			p.fail("expected , or %c, not %q", closer, p.rest())
		}
	}
}

// flowItem reads a node inside a flow collection.
func (p *yparser) flowItem(s *yschema) *ynode {
	if p.eof() {
		p.fail("a flow collection without its end")
	}
	switch p.src[p.pos] {
	case '[', '{':
		return p.flow(s)
	case ',', ']', '}':
		p.fail("a value was expected before %c", p.src[p.pos])
	}
	n := p.scalar(true, s)
	if n.kind == yNull && n.value == "" {
		p.fail("a value was expected, not %q", p.rest())
	}
	return n
}
