package config

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file reads the resources of an xDS push: RateLimitConfig messages
// from their bytes as they came, never decoded into messages (a decoded
// descriptor costs over a hundred bytes, where its wire form costs a
// few), into the tree that a file's YAML is read into, with no text
// between: the tree is what the file that envoyproxy/ratelimit converts
// the push into (ConfigXdsProtoToYaml) would read as.

// LoadXDS reads the resources of an xDS push into one Config: each is
// the bytes of a RateLimitConfig message, of type
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, as
// Envoy Gateway serves them. A push loads as the YAML that
// envoyproxy/ratelimit converts it to would load, with the same checks
// and errors (an error names the resource by its place in the push and
// its name, and a file "xds:" and its name), but no text is written or
// read.
//
// Its bounds are a file's: MaxBytes bounds the push's size as that YAML,
// which a first reading of the bytes measures before any of the tree is
// made; MaxDepth and the rules' keys are bounded as Load bounds them; and
// descriptors nest at most 64 levels on the wire. Every string must be
// UTF-8, as proto3's are. A field that the RateLimitConfig of
// go-control-plane's ratelimit module v0.1.0 does not have is an error,
// except quota_mode (7), which newer ones carry; metadata (8) is refused
// by name, as a file's is. A singular field given twice keeps its last
// value, as protobuf reads it, and a rate_limit given twice is an error
// (protobuf would merge the two).
func (o Options) LoadXDS(resources [][]byte) (*Config, error) {
	r := xdsReader{max: o.maxBytes(), pace: o.Pace}
	type resource struct {
		name   string
		domain []byte
		top    int // descriptors at the domain's top
	}
	rs := make([]resource, len(resources))
	for i, msg := range resources {
		var err error
		if rs[i].name, rs[i].domain, rs[i].top, err = r.config(msg); err != nil {
			return nil, fmt.Errorf("xDS resource %d (%q): %w", i, rs[i].name, err)
		}
	}
	// The tree of one descriptor at the domain's top at a time is made,
	// loaded, and its nodes made again into the next's: the tree of a
	// push costs what its largest descriptor's does.
	ld := o.loader(r.size)
	r.build = true
	for i, msg := range resources {
		name, domain := "xds:"+rs[i].name, unsafe.String(unsafe.SliceData(rs[i].domain), len(rs[i].domain))
		n, err := ld.open(name, &ynode{}, &ynode{}, domain)
		if err != nil {
			return nil, err
		}
		for it := (xdsIter{msg: msg}); it.next(); {
			if it.f.num != 3 {
				continue
			}
			r.reset()
			d, err := r.descriptor(it.f.data, 0)
			if err != nil { // the first reading found none: never
				return nil, fmt.Errorf("xDS resource %d (%q): %w", i, rs[i].name, err)
			}
			if err := ld.descriptor(name, n, 0, 0, d, rs[i].top); err != nil {
				return nil, err
			}
		}
		ld.close(domain, n)
	}
	return ld.done(), nil
}

// xdsUnits name the units by number: the types' enum ends at DAY, and
// the server may send the rest.
var xdsUnits = [...]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}

// xdsMaxDepth bounds the descriptors' nesting that a push may hold on
// the wire: a tree deeper than any configuration has is refused before
// it is walked further (MaxDepth, lower, is checked as it loads).
const xdsMaxDepth = 64

// xdsReader reads a push's resources twice: first to check their bytes
// and measure them (build false: nothing is made), then to make the tree
// of each descriptor at a domain's top (build true).
type xdsReader struct {
	build bool
	size  int     // the push's YAML bytes so far, as the first reading measures them
	max   int     // the most size may reach
	pace  func()  // Options.Pace, called before each descriptor at a domain's top
	nodes []ynode // what node takes from, from used on
	used  int
	text  []byte // what numbers' text is written in
}

// ErrTooLarge is the error, wrapped, of a push that LoadXDS refuses for
// its size: its YAML would be larger than MaxBytes allows.
var ErrTooLarge = errors.New("the push's configuration is larger than its bound on bytes allows")

// xdsField is one field of a message's bytes.
type xdsField struct {
	num  protowire.Number
	typ  protowire.Type
	v    uint64 // a varint's value
	data []byte // a length-delimited field's bytes
}

// xdsIter walks a message's fields in order, allocating nothing.
type xdsIter struct {
	msg []byte
	f   xdsField
	err error
}

// next moves to the next field, and reports whether there is one; at
// the end, err is set if the bytes did not parse.
func (it *xdsIter) next() bool {
	if len(it.msg) == 0 || it.err != nil {
		return false
	}
	num, typ, n := protowire.ConsumeTag(it.msg)
	if n < 0 {
		it.err = errors.New("the message's bytes do not parse")
		return false
	}
	it.msg = it.msg[n:]
	it.f = xdsField{num: num, typ: typ}
	switch typ {
	case protowire.VarintType:
		it.f.v, n = protowire.ConsumeVarint(it.msg)
	case protowire.BytesType:
		it.f.data, n = protowire.ConsumeBytes(it.msg)
	default:
		n = protowire.ConsumeFieldValue(num, typ, it.msg)
	}
	if n < 0 {
		it.err = errors.New("the message's bytes do not parse")
		return false
	}
	it.msg = it.msg[n:]
	return true
}

// want is the error of a field of the wrong wire type, or nil.
func (f *xdsField) want(typ protowire.Type, name string) error {
	if f.typ != typ {
		return fmt.Errorf("%s: wire type %d", name, f.typ)
	}
	return nil
}

// text is the error of a string field of the wrong wire type or not in
// UTF-8, or nil.
func (f *xdsField) text(name string) error {
	if err := f.want(protowire.BytesType, name); err != nil {
		return err
	}
	if !utf8.Valid(f.data) {
		return fmt.Errorf("%s: not UTF-8", name)
	}
	return nil
}

// node makes a node, from a block of them that reset makes again.
func (r *xdsReader) node(kind ykind) *ynode {
	if r.used == len(r.nodes) {
		r.nodes, r.used = make([]ynode, max(256, 2*len(r.nodes))), 0
	}
	n := &r.nodes[r.used]
	r.used++
	n.kind = kind
	return n
}

// reset makes the nodes and numbers made so far again: nothing holds
// them any longer.
func (r *xdsReader) reset() {
	clear(r.nodes[:r.used])
	r.used = 0
	r.text = r.text[:0]
}

// str is a string's node: a quoted scalar (never null or a boolean)
// that shares b's bytes.
func (r *xdsReader) str(b []byte) *ynode {
	n := r.node(yScalar)
	n.value, n.quoted = unsafe.String(unsafe.SliceData(b), len(b)), true
	return n
}

// plain is a plain scalar's node, as a number, a unit or true is
// written.
func (r *xdsReader) plain(s string) *ynode {
	n := r.node(yScalar)
	n.value = s
	return n
}

// number is v's text, from a block that is only ever appended to.
func (r *xdsReader) number(v uint64) string {
	if cap(r.text)-len(r.text) < 20 {
		r.text = make([]byte, 0, 4<<10)
	}
	start := len(r.text)
	r.text = strconv.AppendUint(r.text, v, 10)
	b := r.text[start:]
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// ylist appends nodes to a collection: a mapping's keys and values, or
// a sequence's items.
type ylist struct{ n, last *ynode }

func (l *ylist) add(c *ynode) {
	if l.last == nil {
		l.n.first = c
	} else {
		l.last.next = c
	}
	l.last = c
}

// put adds the field key: v to the mapping l holds.
func (r *xdsReader) put(l *ylist, key string, v *ynode) {
	l.add(r.plain(key))
	l.add(v)
}

// item adds v to the sequence that seq holds, made at its first item.
func (r *xdsReader) item(seq *ylist, v *ynode) {
	if seq.n == nil {
		seq.n = r.node(ySeq)
	}
	seq.add(v)
}

// config reads a RateLimitConfig the first time, and returns its name,
// its domain, and how many descriptors its domain's top holds.
func (r *xdsReader) config(msg []byte) (name string, domain []byte, top int, err error) {
	r.size += len("{domain: \"\"}\n")
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return name, nil, 0, it.err
			}
			break
		}
		f := &it.f
		switch f.num {
		case 1:
			if err := f.text("name"); err != nil {
				return name, nil, 0, err
			}
			name = string(f.data)
		case 2:
			if err := f.text("domain"); err != nil {
				return name, nil, 0, err
			}
			domain = f.data
		case 3:
			if err := f.want(protowire.BytesType, "descriptors"); err != nil {
				return name, nil, 0, err
			}
			r.list(top == 0, "descriptors")
			top++
			if r.pace != nil {
				r.pace()
			}
			if _, err := r.descriptor(f.data, 0); err != nil {
				return name, nil, 0, err
			}
		default:
			return name, nil, 0, fmt.Errorf("the config: field %d is not known to floodgate-rls", f.num)
		}
	}
	if r.size += len(domain); r.size > r.max {
		return name, nil, 0, ErrTooLarge
	}
	return name, domain, top, nil
}

// list measures a list's separator: its opening and closing before the
// first item, a comma before the others.
func (r *xdsReader) list(first bool, name string) {
	if first {
		r.size += len(name) + len(": [], ")
	} else {
		r.size += len(", ")
	}
}

// descriptor reads one RateLimitDescriptor: its children as they are
// read, then its own fields.
func (r *xdsReader) descriptor(msg []byte, depth int) (*ynode, error) {
	if r.size > r.max && !r.build {
		return nil, ErrTooLarge
	}
	if depth >= xdsMaxDepth {
		return nil, fmt.Errorf("descriptors nested deeper than %d levels", xdsMaxDepth)
	}
	var key, value, policy []byte
	var hasKey, hasPolicy bool
	var shadow, detailed, quota uint64
	var seq ylist
	r.size += len("{key: \"\"}")
	n := 0
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return nil, it.err
			}
			break
		}
		f := &it.f
		var err error
		switch f.num {
		case 1:
			err, key, hasKey = f.text("key"), f.data, true
		case 2:
			err, value = f.text("value"), f.data
		case 3:
			if hasPolicy {
				return nil, fmt.Errorf("descriptor %q: rate_limit appears twice", key)
			}
			err, policy, hasPolicy = f.want(protowire.BytesType, "rate_limit"), f.data, true
		case 4:
			if err = f.want(protowire.BytesType, "descriptors"); err == nil {
				r.list(n == 0, "descriptors")
				n++
				var d *ynode
				if d, err = r.descriptor(f.data, depth+1); err == nil && r.build {
					r.item(&seq, d)
				}
			}
		case 5:
			err, shadow = f.want(protowire.VarintType, "shadow_mode"), f.v
		case 6:
			err, detailed = f.want(protowire.VarintType, "detailed_metric"), f.v
		case 7:
			err, quota = f.want(protowire.VarintType, "quota_mode"), f.v
		case 8:
			return nil, fmt.Errorf("descriptor %q: metadata is not implemented by floodgate-rls", key)
		default:
			return nil, fmt.Errorf("descriptor %q: field %d is not known to floodgate-rls", key, f.num)
		}
		if err != nil {
			return nil, err
		}
	}
	if !hasKey || len(key) == 0 {
		return nil, errors.New("a descriptor has an empty key")
	}
	r.size += len(key)
	if len(value) > 0 {
		r.size += len(", value: \"\"") + len(value)
	}
	flags := [...]struct {
		name string
		v    uint64
	}{{"shadow_mode", shadow}, {"detailed_metric", detailed}, {"quota_mode", quota}}
	for _, flag := range flags {
		if flag.v != 0 {
			r.size += len(", ") + len(flag.name) + len(": true")
		}
	}
	var pol *ynode
	if hasPolicy {
		r.size += len(", rate_limit: ")
		var err error
		if pol, err = r.policy(key, policy); err != nil {
			return nil, err
		}
	}
	if !r.build {
		return nil, nil
	}
	d := r.node(yMap)
	m := ylist{n: d}
	if seq.n != nil {
		r.put(&m, "descriptors", seq.n)
	}
	r.put(&m, "key", r.str(key))
	if len(value) > 0 {
		r.put(&m, "value", r.str(value))
	}
	for _, flag := range flags {
		if flag.v != 0 {
			r.put(&m, flag.name, r.plain("true"))
		}
	}
	if pol != nil {
		r.put(&m, "rate_limit", pol)
	}
	return d, nil
}

// policy reads a RateLimitPolicy.
func (r *xdsReader) policy(key, msg []byte) (*ynode, error) {
	var unit, rpu, unlimited uint64
	var name []byte
	var replaces ylist
	r.size += len("{requests_per_unit: }")
	n := 0
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return nil, it.err
			}
			break
		}
		f := &it.f
		var err error
		switch f.num {
		case 1:
			err, unit = f.want(protowire.VarintType, "unit"), f.v
		case 2:
			err, rpu = f.want(protowire.VarintType, "requests_per_unit"), f.v
		case 3:
			err, unlimited = f.want(protowire.VarintType, "unlimited"), f.v
		case 4:
			err, name = f.text("name"), f.data
		case 5:
			if err = f.want(protowire.BytesType, "replaces"); err != nil {
				return nil, err
			}
			var rn []byte
			for e := (xdsIter{msg: f.data}); e.next() || e.err != nil; {
				if e.err != nil {
					return nil, e.err
				}
				if e.f.num != 1 {
					return nil, fmt.Errorf("a replaces entry: field %d is not known to floodgate-rls", e.f.num)
				}
				if err := e.f.text("replaces name"); err != nil {
					return nil, err
				}
				rn = e.f.data
			}
			r.list(n == 0, "replaces")
			n++
			r.size += len("{name: \"\"}") + len(rn)
			if r.build {
				entry := r.node(yMap)
				r.put(&ylist{n: entry}, "name", r.str(rn))
				r.item(&replaces, entry)
			}
		default:
			return nil, fmt.Errorf("descriptor %q's rate_limit: field %d is not known to floodgate-rls", key, f.num)
		}
		if err != nil {
			return nil, err
		}
	}
	rpu = uint64(uint32(rpu))  // a uint32 on the wire is its low 32 bits
	unit = uint64(int32(unit)) // and an enum an int32
	for v := rpu; v >= 10; v /= 10 {
		r.size++
	}
	r.size++
	if unit != 0 {
		r.size += len(", unit: \"-2147483648\"")
	}
	if unlimited != 0 {
		r.size += len(", unlimited: true")
	}
	if len(name) > 0 {
		r.size += len(", name: \"\"") + len(name)
	}
	if !r.build {
		return nil, nil
	}
	p := r.node(yMap)
	m := ylist{n: p}
	if replaces.n != nil {
		r.put(&m, "replaces", replaces.n)
	}
	r.put(&m, "requests_per_unit", r.plain(r.number(rpu)))
	if unit != 0 {
		if unit < uint64(len(xdsUnits)) && xdsUnits[unit] != "" {
			r.put(&m, "unit", r.plain(xdsUnits[unit]))
		} else {
			// Refused by the load, which names it.
			r.put(&m, "unit", r.str([]byte(strconv.FormatInt(int64(int32(unit)), 10))))
		}
	}
	if unlimited != 0 {
		r.put(&m, "unlimited", r.plain("true"))
	}
	if len(name) > 0 {
		r.put(&m, "name", r.str(name))
	}
	return p, nil
}
