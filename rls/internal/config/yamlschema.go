package config

// This file holds the shape that a document must have (yschema), which
// the YAML reader checks as it makes each node, so that a file of the
// wrong shape is refused at its first wrong node.

// yschema is what a node may be: its kind, and for a mapping the schema
// of each key's value, for a sequence its items'. A nil schema takes
// anything. A null is taken wherever a node is, as a missing one.
type yschema struct {
	kind   ykind // yMap, ySeq or yScalar
	what   string
	fields map[string]*yschema
	names  string // the fields' names, for errors
	items  *yschema
}

// keySchema is a mapping key's: a scalar.
var keySchema = &yschema{kind: yScalar, what: "a key must be a string"}

// check fails unless a node of kind may be here.
func (s *yschema) check(p *yparser, kind ykind) {
	if s == nil || kind == yNull || kind == s.kind {
		return
	}
	p.fail("%s", s.what)
}

// field is the schema of key's value in the mapping s holds, and fails
// on a key that s has none of.
func (s *yschema) field(p *yparser, key string) *yschema {
	if s == nil {
		return nil
	}
	f, ok := s.fields[key]
	if !ok {
		if why, known := unsupported[key]; known {
			p.fail("%s", why)
		}
		p.fail("unknown key %q here: expected %s", key, s.names)
	}
	return f
}

// items is the schema of a sequence's items.
func (s *yschema) itemsOf() *yschema {
	if s == nil {
		return nil
	}
	return s.items
}
