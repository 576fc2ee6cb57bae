package config

import (
	"bytes"
	"context"
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
// A first reading of the bytes checks them and measures the push
// against its bounds before any of the Config is made, so that a push
// over one is refused at the cost of reading it: MaxBytes bounds its
// size as that YAML; MaxDepth its nesting (and descriptors nest at most
// 64 levels on the wire whatever MaxDepth says); MaxRules its rules;
// and MaxMemory what the Config would keep, as estimated from what the
// push holds. The Config is then made one descriptor at a time from the
// bytes, so that what loading a push takes besides the push and the
// Config is a few nodes for each level of its deepest descriptor; a
// push whose bytes, with that, would be more than the Config keeps
// (and 1 MiB) is refused, so that a push never takes more than twice
// what it keeps to load. Every string must be UTF-8, as proto3's are.
// A field that the RateLimitConfig of go-control-plane's ratelimit
// module v0.1.0 does not have is an error, except quota_mode (7), which
// newer ones carry; metadata (8) is refused by name, as a file's is. A
// singular field given twice keeps its last value, as protobuf reads
// it, and a rate_limit given twice is an error (protobuf would merge the
// two).
func (o Options) LoadXDS(resources [][]byte) (*Config, error) {
	return o.LoadXDSContext(context.Background(), resources)
}

// LoadXDSContext is LoadXDS, stopped when ctx ends: it then returns
// ctx's cause (context.Cause), and no Config. A caller that must answer
// a push within a time gives it a deadline.
func (o Options) LoadXDSContext(ctx context.Context, resources [][]byte) (*Config, error) {
	r := xdsReader{max: o.maxBytes(), maxDepth: min(o.maxDepth(), xdsMaxDepth), maxRules: o.maxRules(), maxMemory: o.maxMemory(),
		pace: o.Pace, ctx: ctx}
	type resource struct {
		name   string
		domain []byte
		top    int // descriptors at the domain's top
	}
	rs := make([]resource, len(resources))
	pushBytes := 0
	for i, msg := range resources {
		var err error
		if rs[i].name, rs[i].domain, rs[i].top, err = r.config(msg); err != nil {
			return nil, fmt.Errorf("xDS resource %d (%q): %w", i, rs[i].name, err)
		}
		pushBytes += len(msg)
	}
	if held := pushBytes + r.transient(); held > r.cost+1<<20 {
		return nil, fmt.Errorf("the push's %d bytes and what reading them takes (%d bytes in all) are more than the %d bytes its configuration would keep: "+
			"refused, so that no push takes more than twice what it keeps to load (a field given again and again, or replaces by the thousand)", pushBytes, held, r.cost)
	}
	// Each descriptor is made from its bytes, loaded, and its nodes
	// made again into the next's; a descriptor's children are read from
	// its bytes when the loader reaches them (wireDescriptors).
	ld := o.loader(r.size)
	ld.xds, ld.ctx = &r, ctx
	ld.maxRules, ld.maxMemory = 0, 0 // the first reading measured them
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
			if err := r.child(ld, name, n, 0, 0, it.f.data, rs[i].top); err != nil {
				return nil, err
			}
		}
		ld.close(domain, n)
	}
	return ld.done(), nil
}

// wireDescriptors adds the descriptors of a push's descriptor, whose
// bytes are msg, under parent, as descriptors adds a file's.
func (ld *loader) wireDescriptors(name string, parent *node, depth int, shared uint64, msg string) error {
	b := unsafe.Slice(unsafe.StringData(msg), len(msg))
	siblings := 0
	for it := (xdsIter{msg: b}); it.next(); {
		if it.f.num == 4 {
			siblings++
		}
	}
	if depth >= ld.maxDepth && siblings > 0 { // the first reading refused it: never
		return fmt.Errorf("%s: descriptors nested deeper than %d levels", name, ld.maxDepth)
	}
	for it := (xdsIter{msg: b}); it.next(); {
		if it.f.num != 4 {
			continue
		}
		if err := ld.xds.child(ld, name, parent, depth, shared, it.f.data, siblings); err != nil {
			return err
		}
	}
	return nil
}

// child makes the tree of one descriptor, its children left as their
// bytes, and loads it under parent, one of siblings; then its nodes are
// made again into the next's.
func (r *xdsReader) child(ld *loader, name string, parent *node, depth int, shared uint64, msg []byte, siblings int) error {
	m := r.mark()
	d, _, err := r.descriptor(msg, depth)
	if err != nil { // the first reading found none: never
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := ld.descriptor(name, parent, depth, shared, d, siblings); err != nil {
		return err
	}
	r.release(m)
	return nil
}

// xdsUnits name the units by number: the types' enum ends at DAY, and
// the server may send the rest.
var xdsUnits = [...]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}

// xdsMaxDepth bounds the descriptors' nesting that a push may hold on
// the wire, whatever MaxDepth says, so that the first reading's
// recursion is bounded: a tree deeper than any configuration has is
// refused before it is walked further.
const xdsMaxDepth = 64

// xdsReader reads a push's resources twice: first to check their bytes
// and measure them against the bounds (build false: nothing is made),
// then to make the tree of each descriptor, one at a time, its children
// left as their bytes (build true).
type xdsReader struct {
	build bool
	ctx   context.Context
	pace  func() // Options.Pace, called before each descriptor at a domain's top

	// The first reading's measures, and their bounds (0: none, but for
	// max and maxDepth).
	size      int // the push's YAML bytes so far
	max       int
	maxDepth  int
	rules     int
	maxRules  int
	cost      int // what the Config would keep, estimated (descCost)
	maxMemory int
	peak      int // the most nodes the second reading holds at once
	read      int // descriptors read, to look at ctx every so often

	// The second reading's nodes: blocks[:cur] are full, blocks[cur][:used]
	// in use; and the text of its numbers.
	blocks    [][]ynode
	cur, used int
	text      []byte
	textGen   int // how many blocks text has had
}

// xdsMark is a place in the second reading's nodes and text, which
// release makes again.
type xdsMark struct{ cur, used, text, textGen int }

// transient is what the second reading may hold at once besides the
// Config, in bytes: its nodes (in blocks up to twice as many), its
// text, and the loader's buffers.
func (r *xdsReader) transient() int {
	return 2*r.peak*int(unsafe.Sizeof(ynode{})) + 64<<10
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

// node makes a node, from the blocks that release makes again.
func (r *xdsReader) node(kind ykind) *ynode {
	if len(r.blocks) == 0 || r.used == len(r.blocks[r.cur]) {
		if len(r.blocks) > 0 {
			r.cur++
		}
		if r.cur == len(r.blocks) {
			n := 256
			if r.cur > 0 {
				n = 2 * len(r.blocks[r.cur-1])
			}
			r.blocks = append(r.blocks, make([]ynode, n))
		}
		r.used = 0
	}
	n := &r.blocks[r.cur][r.used]
	r.used++
	n.kind = kind
	return n
}

// mark is where the nodes and the text are now.
func (r *xdsReader) mark() xdsMark {
	return xdsMark{cur: r.cur, used: r.used, text: len(r.text), textGen: r.textGen}
}

// release makes the nodes and the text made since m again: nothing
// holds them any longer.
func (r *xdsReader) release(m xdsMark) {
	for c := m.cur; c <= r.cur && c < len(r.blocks); c++ {
		from, to := 0, len(r.blocks[c])
		if c == m.cur {
			from = m.used
		}
		if c == r.cur {
			to = r.used
		}
		if from < to {
			clear(r.blocks[c][from:to])
		}
	}
	r.cur, r.used = m.cur, m.used
	if r.textGen == m.textGen {
		r.text = r.text[:m.text]
	}
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

// number is v's text, from a block that release makes again.
func (r *xdsReader) number(v uint64) string {
	if cap(r.text)-len(r.text) < 20 {
		r.text = make([]byte, 0, 4<<10)
		r.textGen++
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
	rules := r.rules
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
			_, peak, err := r.descriptor(f.data, 0)
			if err != nil {
				return name, nil, 0, err
			}
			r.peak = max(r.peak, peak)
		default:
			return name, nil, 0, fmt.Errorf("the config: field %d is not known to floodgate-rls", f.num)
		}
	}
	if r.size += len(domain); r.size > r.max {
		return name, nil, 0, ErrTooLarge
	}
	// The domain: its node, its name, and its share of each rule's key
	// and path; the top's map.
	r.cost += nodeBytes + allocBytes(len(domain)) + slotBytes + (r.rules-rules)*(len(domain)+fieldLen(len(domain)))
	if top > 1 {
		r.cost += top * slotBytes
	}
	return name, domain, top, r.bound()
}

// bound is the error of a first reading past a bound on rules or
// memory, or nil.
func (r *xdsReader) bound() error {
	switch {
	case r.maxRules > 0 && r.rules > r.maxRules:
		return fmt.Errorf("%w: more than %d", ErrTooManyRules, r.maxRules)
	case r.maxMemory > 0 && r.cost > r.maxMemory:
		return fmt.Errorf("%w: more than %d bytes", ErrTooMuchMemory, r.maxMemory)
	}
	return nil
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

// descriptor reads one RateLimitDescriptor, depth levels below its
// domain. The first reading reads its children as they come, then its
// own fields, and measures it (size, rules, cost), and returns peak,
// the most nodes the second reading holds at once for it and its
// descendants. The second reading makes its node, its children left as
// their bytes (yWire), for wireDescriptors to read.
func (r *xdsReader) descriptor(msg []byte, depth int) (d *ynode, peak int, err error) {
	if !r.build {
		if r.size > r.max {
			return nil, 0, ErrTooLarge
		}
		if err := r.bound(); err != nil {
			return nil, 0, err
		}
		if r.read++; r.read%1024 == 0 && r.ctx.Err() != nil {
			return nil, 0, context.Cause(r.ctx)
		}
	}
	if depth >= r.maxDepth {
		return nil, 0, fmt.Errorf("descriptors nested deeper than %d levels", r.maxDepth)
	}
	var key, value, policy []byte
	var hasKey, hasPolicy bool
	var shadow, detailed, quota uint64
	rules := r.rules
	r.size += len("{key: \"\"}")
	n := 0
	for it := (xdsIter{msg: msg}); ; {
		if !it.next() {
			if it.err != nil {
				return nil, 0, it.err
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
				return nil, 0, fmt.Errorf("descriptor %q: rate_limit appears twice", key)
			}
			err, policy, hasPolicy = f.want(protowire.BytesType, "rate_limit"), f.data, true
		case 4:
			if err = f.want(protowire.BytesType, "descriptors"); err == nil {
				r.list(n == 0, "descriptors")
				n++
				if !r.build {
					var p int
					_, p, err = r.descriptor(f.data, depth+1)
					peak = max(peak, p)
				}
			}
		case 5:
			err, shadow = f.want(protowire.VarintType, "shadow_mode"), f.v
		case 6:
			err, detailed = f.want(protowire.VarintType, "detailed_metric"), f.v
		case 7:
			err, quota = f.want(protowire.VarintType, "quota_mode"), f.v
		case 8:
			return nil, 0, fmt.Errorf("descriptor %q: metadata is not implemented by floodgate-rls", key)
		default:
			return nil, 0, fmt.Errorf("descriptor %q: field %d is not known to floodgate-rls", key, f.num)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if !hasKey || len(key) == 0 {
		return nil, 0, errors.New("a descriptor has an empty key")
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
	c := descCost{kv: len(key), stars: bytes.Count(key, []byte{'*'}) + bytes.Count(value, []byte{'*'}), rule: hasPolicy}
	if len(value) > 0 {
		c.kv += 1 + len(value)
	}
	if hasPolicy {
		r.size += len(", rate_limit: ")
		var err error
		if pol, err = r.policy(key, policy, &c); err != nil {
			return nil, 0, err
		}
	}
	if !r.build {
		// Its own cost, and its key_value's share of the key and path of
		// each rule at or below it; its children's map.
		if hasPolicy {
			r.rules++
		}
		r.cost += c.bytes() + (r.rules-rules)*(1+fieldLen(c.kv)+c.kv)
		if n > 1 {
			r.cost += n * slotBytes
		}
		return nil, peak + xdsNodes + 3*c.replaces, nil
	}
	d = r.node(yMap)
	m := ylist{n: d}
	if n > 0 {
		w := r.node(yWire)
		w.value = unsafe.String(unsafe.SliceData(msg), len(msg))
		r.put(&m, "descriptors", w)
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
	return d, 0, nil
}

// xdsNodes is the most nodes that the second reading makes for a
// descriptor, its rate_limit's replaces aside (three each): its map and
// each of its fields' key and value, and its rate_limit's.
const xdsNodes = 1 + 2*6 + 1 + 2*5 + 2

// policy reads a RateLimitPolicy, and counts what the Config keeps of
// it in c: its name and its replaces.
func (r *xdsReader) policy(key, msg []byte, c *descCost) (*ynode, error) {
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
			c.replaces++
			c.repline += allocBytes(len(rn))
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
	c.name = len(name)
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
