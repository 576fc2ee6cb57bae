package config

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/floodgate-go/floodgate"
)

// This file loads a configuration's tree, a file's or a push's, into a
// Config: the loader, and the reading of the tree's fields.

// The keys of a file, a descriptor and a rate_limit.
var (
	fileKeys       = []string{"domain", "descriptors"}
	descriptorKeys = []string{"key", "value", "rate_limit", "descriptors", "shadow_mode", "quota_mode", "detailed_metric", "share_threshold"}
	rateLimitKeys  = []string{"unit", "requests_per_unit", "unlimited", "name", "replaces", "algorithm", "burst"}
)

// fileSchema is what a file may hold, which the YAML reader checks as it
// reads: a collection where a scalar belongs, a scalar where a
// collection does, or an unknown key is refused there, before the rest
// of the file is read.
var fileSchema = func() *yschema {
	scalar := &yschema{kind: yScalar, what: "expected a string"}
	flag := &yschema{kind: yScalar, what: "expected true or false"}
	mapOf := func(keys []string, fields map[string]*yschema) *yschema {
		for _, k := range keys {
			if fields[k] == nil {
				fields[k] = scalar
			}
		}
		return &yschema{kind: yMap, what: "expected a map of " + strings.Join(keys, ", "), fields: fields, names: strings.Join(keys, ", ")}
	}
	replaces := &yschema{kind: ySeq, what: "replaces must be a list of {name: ...}", items: mapOf([]string{"name"}, map[string]*yschema{})}
	rateLimit := mapOf(rateLimitKeys, map[string]*yschema{"unlimited": flag, "replaces": replaces})
	descriptors := &yschema{kind: ySeq, what: "descriptors must be a list"}
	descriptors.items = mapOf(descriptorKeys, map[string]*yschema{"rate_limit": rateLimit, "descriptors": descriptors,
		"shadow_mode": flag, "quota_mode": flag, "detailed_metric": flag, "share_threshold": flag})
	return mapOf(fileKeys, map[string]*yschema{"descriptors": descriptors})
}()

// errAt is an error about file name at the line of n (a node of a push,
// which has no lines, is line 0: the error names none).
func errAt(name string, n *ynode, format string, args ...any) error {
	if n.line == 0 {
		return fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
	return fmt.Errorf("%s:%d: %s", name, n.line, fmt.Sprintf(format, args...))
}

// loader is one Load's state.
type loader struct {
	c          *Config
	merge      bool
	maxDepth   int
	keyBytes   int // the rules' keys and paths so far
	maxKey     int // the most keyBytes may reach
	full       []byte
	path       []byte
	kv         []byte  // a descriptor's key_value, then its rule's key and path
	nodes      []node  // the rest of the block newNode takes from
	limits     []Limit // the rest of the block loadLimit takes from
	nodesMade  int     // the nodes of every block so far
	limitsMade int     // the Limits of every block so far
	pace       func()  // Options.Pace

	// A file's bounds on rules and memory (a push's first reading
	// checks them: 0 then), and the memory kept so far (descCost).
	maxRules, maxMemory, cost int

	xds   *xdsReader      // a push's: what reads the descriptors of a yWire
	ctx   context.Context // a push's: the load stops when it ends
	ticks int             // descriptors loaded, to look at ctx every so often
}

// load adds one file's domain to c.
func (ld *loader) load(f File) error {
	// The tree's scalars share f.Data's bytes, without a copy: whatever
	// the Config keeps of them is cloned.
	root, err := parseYAML(unsafe.String(unsafe.SliceData(f.Data), len(f.Data)), len(f.Data)/3+64, fileSchema, ld.pace)
	if e, ok := err.(*yerr); ok {
		return fmt.Errorf("%s:%d: %s", f.Name, e.line, e.msg)
	}
	if root == nil {
		return fmt.Errorf("%s: no domain: the file is empty", f.Name)
	}
	return ld.domain(f.Name, root)
}

// domain adds the domain of root, a file's tree, to c.
func (ld *loader) domain(name string, root *ynode) error {
	fields, err := mapping(name, root, fileKeys...)
	if err != nil {
		return err
	}
	domain, err := str(name, fields.get("domain"))
	if err != nil {
		return err
	}
	n, err := ld.open(name, root, fields.get("domain"), domain)
	if err != nil {
		return err
	}
	if err := ld.descriptors(name, n, 0, 0, fields.get("descriptors")); err != nil {
		return err
	}
	ld.close(domain, n)
	return nil
}

// open starts domain, the value of at in the file's tree root, and
// returns its node: its descriptors are added to that, and close adds
// it to c.
func (ld *loader) open(name string, root, at *ynode, domain string) (*node, error) {
	if domain == "" {
		return nil, errAt(name, root, "the domain is empty")
	}
	n, dup := ld.c.domains[domain]
	switch {
	case dup && !ld.merge:
		return nil, errAt(name, at, "domain %q is in another file too (MERGE_DOMAIN_CONFIG merges them)", domain)
	case !dup:
		n = &node{}
	}
	ld.full = append(ld.full[:0], domain...)
	ld.path = AppendField(ld.path[:0], domain)
	return n, nil
}

// close adds domain, whose node open returned, to c.
func (ld *loader) close(domain string, n *node) {
	ld.c.domains[strings.Clone(domain)] = n
}

// descriptors adds the descriptors of seq (nil: none) under parent,
// whose full key is ld.full and whose place in the tree is ld.path, at
// depth levels below the domain; shared marks the share_threshold levels
// above.
func (ld *loader) descriptors(name string, parent *node, depth int, shared uint64, seq *ynode) error {
	if seq == nil || seq.kind == yNull {
		return nil
	}
	if seq.kind == yWire {
		return ld.wireDescriptors(name, parent, depth, shared, seq.value)
	}
	if seq.kind != ySeq {
		return errAt(name, seq, "descriptors must be a list")
	}
	if depth >= ld.maxDepth && seq.first != nil {
		return errAt(name, seq, "descriptors nested deeper than %d levels", ld.maxDepth)
	}
	siblings := 0
	for d := seq.first; d != nil; d = d.next {
		siblings++
	}
	for d := seq.first; d != nil; d = d.next {
		if err := ld.descriptor(name, parent, depth, shared, d, siblings); err != nil {
			return err
		}
	}
	return nil
}

// descriptor adds descriptor d under parent, as descriptors does, one of
// siblings in its list.
func (ld *loader) descriptor(name string, parent *node, depth int, shared uint64, d *ynode, siblings int) error {
	if ld.pace != nil {
		ld.pace()
	}
	if ld.ticks++; ld.ctx != nil && ld.ticks%64 == 0 && ld.ctx.Err() != nil {
		return context.Cause(ld.ctx)
	}
	fullLen, pathLen := len(ld.full), len(ld.path)
	fields, err := mapping(name, d, descriptorKeys...)
	if err != nil {
		return err
	}
	key, err := str(name, fields.get("key"))
	if err != nil {
		return err
	}
	if key == "" {
		return errAt(name, d, "a descriptor has an empty key")
	}
	value, err := str(name, fields.get("value"))
	if err != nil {
		return err
	}
	ld.kv = append(ld.kv[:0], key...)
	if value != "" {
		ld.kv = append(append(ld.kv, '_'), value...)
	}
	ld.full = append(append(ld.full, '.'), ld.kv...)
	ld.path = AppendField(ld.path, unsafe.String(unsafe.SliceData(ld.kv), len(ld.kv)))
	rl := fields.get("rate_limit")
	if rl != nil && rl.kind == yNull {
		rl = nil
	}
	// The child's key: a rule's shares the string that holds the rule's
	// key and path (the key ends with it), one allocation a rule.
	var kv, both string
	if rl != nil {
		kvLen := len(ld.kv)
		ld.kv = append(append(ld.kv[:0], ld.full...), ld.path...)
		both = string(ld.kv)
		kv = both[len(ld.full)-kvLen : len(ld.full)]
	} else {
		kv = string(ld.kv)
	}
	child := ld.newNode()
	if !parent.addChild(kv, child, siblings) {
		return errAt(name, d, "descriptor %q appears twice", ld.full)
	}
	var shadow, quota, detailed, share bool
	for _, f := range []struct {
		b   *bool
		key string
	}{{&shadow, "shadow_mode"}, {&quota, "quota_mode"}, {&detailed, "detailed_metric"}, {&share, "share_threshold"}} {
		if *f.b, err = boolean(name, fields.get(f.key)); err != nil {
			return err
		}
	}
	if share && !strings.Contains(kv, "*") {
		return errAt(name, d, "share_threshold needs a wildcard value (one with *), and %q has none", ld.full)
	}
	childShared := shared
	if share {
		child.shared = strings.Clone(value)
		if depth < 64 {
			childShared |= 1 << depth
		}
	}
	if rl != nil {
		if ld.keyBytes += len(ld.full) + len(ld.path); ld.keyBytes > ld.maxKey {
			return errAt(name, d, "the rules' keys would take more than %d bytes, four times the configuration's size: descriptors nested too deep with keys too long", ld.maxKey)
		}
		if child.limit, err = ld.loadLimit(name, rl, both[:len(ld.full)]); err != nil {
			return err
		}
		c := ld.c
		child.limit.Shadow, child.limit.Quota, child.limit.Detailed = shadow, quota, detailed
		child.limit.Index, child.limit.path, child.limit.shared = len(c.rules), both[len(ld.full):], childShared
		c.rules = append(c.rules, child.limit)
		if ld.maxRules > 0 && len(c.rules) > ld.maxRules {
			return fmt.Errorf("%s: %w: more than %d", name, ErrTooManyRules, ld.maxRules)
		}
	}
	if ld.maxMemory > 0 {
		dc := descCost{kv: len(kv), stars: strings.Count(kv, "*"), siblings: siblings, rule: rl != nil, keyPath: len(both)}
		if l := child.limit; l != nil {
			dc.name, dc.replaces = len(l.Name), len(l.Replaces)
			for _, r := range l.Replaces {
				dc.repline += allocBytes(len(r))
			}
		}
		if ld.cost += dc.bytes() + allocBytes(len(child.shared)); ld.cost > ld.maxMemory {
			return fmt.Errorf("%s: %w: more than %d bytes", name, ErrTooMuchMemory, ld.maxMemory)
		}
	}
	if err := ld.descriptors(name, child, depth+1, childShared, fields.get("descriptors")); err != nil {
		return err
	}
	if strings.Contains(kv, "*") {
		parent.wild = append(parent.wild, wildEntry{key: kv, parts: strings.Split(kv, "*")})
	}
	ld.full, ld.path = ld.full[:fullLen], ld.path[:pathLen] // the parent's again, for the next
	return nil
}

// block is the size of the next block of newNode's or loadLimit's,
// made blocks so far: as many as those, from 2 to 256, so that a small
// configuration holds no more than twice what it uses.
func block(made int) int { return min(256, max(2, made)) }

// newNode is a node of the configuration, from a block of them: a load
// makes many, each a few words, and keeps them all.
func (ld *loader) newNode() *node {
	if len(ld.nodes) == 0 {
		ld.nodes = make([]node, block(ld.nodesMade))
		ld.nodesMade += len(ld.nodes)
	}
	n := &ld.nodes[0]
	ld.nodes = ld.nodes[1:]
	return n
}

// loadLimit reads a rate_limit.
func (ld *loader) loadLimit(name string, m *ynode, full string) (*Limit, error) {
	fields, err := mapping(name, m, rateLimitKeys...)
	if err != nil {
		return nil, err
	}
	if len(ld.limits) == 0 {
		ld.limits = make([]Limit, block(ld.limitsMade))
		ld.limitsMade += len(ld.limits)
	}
	l := &ld.limits[0]
	ld.limits = ld.limits[1:]
	l.Key = full
	if l.Unlimited, err = boolean(name, fields.get("unlimited")); err != nil {
		return nil, err
	}
	unit, err := str(name, fields.get("unit"))
	if err != nil {
		return nil, err
	}
	switch u, ok := ParseUnit(unit); {
	case l.Unlimited && unit != "":
		return nil, errAt(name, fields.get("unit"), "an unlimited rule has no unit")
	case !l.Unlimited && !ok:
		return nil, errAt(name, m, "unknown unit %q: second, minute, hour, day, week, month or year", unit)
	default:
		l.Unit = u
	}
	if n := fields.get("requests_per_unit"); n != nil {
		v, err := strconv.ParseUint(n.value, 10, 32)
		if n.kind == yMap || n.kind == ySeq || err != nil {
			return nil, errAt(name, n, "requests_per_unit must be a whole number from 0 to 4294967295, not %q", n.value)
		}
		l.RequestsPerUnit = uint32(v)
	}
	if l.Name, err = str(name, fields.get("name")); err != nil {
		return nil, err
	}
	l.Name = strings.Clone(l.Name)
	if r := fields.get("replaces"); r != nil && r.kind != yNull {
		if r.kind != ySeq {
			return nil, errAt(name, r, "replaces must be a list of {name: ...}")
		}
		for e := r.first; e != nil; e = e.next {
			ef, err := mapping(name, e, "name")
			if err != nil {
				return nil, err
			}
			rn, err := str(name, ef.get("name"))
			if err != nil {
				return nil, err
			}
			switch {
			case rn == "":
				return nil, errAt(name, e, "a replaces entry has no name")
			case rn == l.Name:
				return nil, errAt(name, e, "a rule cannot replace itself (%q)", rn)
			}
			l.Replaces = append(l.Replaces, strings.Clone(rn))
		}
	}
	if l.Algorithm, err = str(name, fields.get("algorithm")); err != nil {
		return nil, err
	}
	switch l.Algorithm {
	case "":
		l.Algorithm = floodgate.FixedWindow
	case floodgate.TokenBucket:
		l.Algorithm = floodgate.TokenBucket // the constant, not the file's bytes
	case floodgate.LeakyBucket:
		l.Algorithm = floodgate.LeakyBucket
	case floodgate.FixedWindow:
		l.Algorithm = floodgate.FixedWindow
	case floodgate.SlidingCounter:
		l.Algorithm = floodgate.SlidingCounter
	case floodgate.SlidingLog:
		l.Algorithm = floodgate.SlidingLog
	default:
		return nil, errAt(name, fields.get("algorithm"), "unknown algorithm %q: token_bucket, leaky_bucket, fixed_window, sliding_counter or sliding_log", l.Algorithm)
	}
	if b := fields.get("burst"); b != nil {
		v, err := strconv.ParseInt(b.value, 10, 64)
		switch {
		case b.kind == yMap || b.kind == ySeq || err != nil || v < 1:
			return nil, errAt(name, b, "burst must be a whole number of 1 or more, not %q", b.value)
		case l.Algorithm != floodgate.TokenBucket && l.Algorithm != floodgate.LeakyBucket:
			return nil, errAt(name, b, "burst is for token_bucket and leaky_bucket, not %s", l.Algorithm)
		}
		l.Burst = v
	}
	if l.Unlimited && (fields.get("algorithm") != nil || fields.get("burst") != nil) {
		return nil, errAt(name, m, "an unlimited rule has no algorithm or burst")
	}
	return l, nil
}

// unsupported are envoyproxy/ratelimit's keys that floodgate-rls does not
// implement, with what to do instead.
var unsupported = map[string]string{
	"value_to_metric": "value_to_metric is not supported by floodgate-rls; use detailed_metric",
	"metadata":        "metadata is not supported by floodgate-rls (envoyproxy/ratelimit added it after v1.4.1-0.20260122083618-3fb702589d36, the version it follows); remove it",
}

// fieldSet is a mapping's fields, by their place among its allowed
// keys.
type fieldSet struct {
	names []string
	v     [8]*ynode
}

// get is the field named key, or nil.
func (f *fieldSet) get(key string) *ynode {
	for i, n := range f.names {
		if n == key {
			return f.v[i]
		}
	}
	return nil
}

// mapping returns m's fields by name, each named in allowed (eight at
// most); any other key is an error at its line.
func mapping(name string, m *ynode, allowed ...string) (fieldSet, error) {
	if m.kind != yMap {
		return fieldSet{}, errAt(name, m, "expected a map of %s", strings.Join(allowed, ", "))
	}
	fields := fieldSet{names: allowed}
	for k := m.first; k != nil; k = k.next.next {
		v := k.next
		if k.kind != yScalar {
			return fieldSet{}, errAt(name, k, "a key must be a string")
		}
		i := 0
		for i < len(allowed) && allowed[i] != k.value {
			i++
		}
		if i == len(allowed) {
			if why, known := unsupported[k.value]; known {
				return fieldSet{}, errAt(name, k, "%s", why)
			}
			return fieldSet{}, errAt(name, k, "unknown key %q here: expected %s", k.value, strings.Join(allowed, ", "))
		}
		if fields.v[i] != nil {
			return fieldSet{}, errAt(name, k, "key %q appears twice", k.value)
		}
		fields.v[i] = v
	}
	return fields, nil
}

// str is a string field's value; a missing or null field is "".
func str(name string, n *ynode) (string, error) {
	if n == nil || n.kind == yNull {
		return "", nil
	}
	if n.kind != yScalar {
		return "", errAt(name, n, "expected a string")
	}
	return n.value, nil
}

// boolean is a boolean field's value; a missing or null field is false.
func boolean(name string, n *ynode) (bool, error) {
	if n == nil || n.kind == yNull {
		return false, nil
	}
	b, ok := boolValue(n)
	if n.kind != yScalar || !ok {
		return false, errAt(name, n, "expected true or false, not %q", n.value)
	}
	return b, nil
}
