// Package config reads envoyproxy/ratelimit's YAML rate-limit
// configuration, and finds the rule for a request's descriptor as that
// server does: the same files load, and a descriptor gets the same rule.
//
// A file holds one domain and its descriptors, nested; a descriptor has a
// key, an optional value (which may hold * wildcards), an optional
// rate_limit (unit, requests_per_unit, unlimited, name, replaces), and
// shadow_mode, quota_mode, detailed_metric and share_threshold. floodgate adds two
// keys to rate_limit: algorithm (token_bucket, leaky_bucket,
// fixed_window, sliding_counter or sliding_log; fixed_window when unset,
// on envoyproxy/ratelimit's epoch-aligned windows) and burst (the
// buckets' capacity; requests_per_unit when unset).
//
// Loading is strict: an unknown key, a value of the wrong type, an empty
// domain or key, a duplicate domain or descriptor, an unknown unit, a
// unit beside unlimited, a bad replaces entry, share_threshold without a
// wildcard, or a floodgate key that does not apply is an error that
// names the file and the line. So are envoyproxy/ratelimit's keys that
// floodgate-rls does not implement (value_to_metric, and metadata, which
// its main branch added after the version floodgate-rls follows): a
// config that relies on them fails to load rather than being decided
// otherwise.
//
// The YAML is read by a reader of the part of YAML that configurations
// are written in: block and flow mappings and sequences, plain and quoted
// scalars on one line, comments, and one document. Anchors, aliases,
// tags, block scalars (| and >), scalars over several lines, and tabs
// outside quoted text and comments are errors that name them. The reader
// checks the file's shape as it reads, so that a file of the wrong shape
// is refused at its first wrong node, and what a load costs is a small
// multiple of the files' bytes (see Options.Load).
//
// An xDS push (RateLimitConfig resources, as Envoy Gateway serves them)
// loads as the YAML that envoyproxy/ratelimit converts it to would, read
// from its bytes with no text between (see Options.LoadXDS).
package config

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"github.com/floodgate-go/floodgate"
)

// File is one configuration file: its name, for errors, and its bytes.
type File struct {
	Name string
	Data []byte
}

// Limit is one descriptor's rate_limit, with what its descriptor says of
// it.
type Limit struct {
	// Key is the rule's full key, domain and each level's key or
	// key_value joined by dots ("domain.key1_value1.key2"): the name of
	// its statistics.
	Key string
	// Name is the rule's name, which other rules' replaces name.
	Name string
	// RequestsPerUnit and Unit are the rule: so many in each window of
	// Unit, the windows aligned to the Unix epoch.
	RequestsPerUnit uint32
	Unit            Unit
	// Unlimited rules are never counted.
	Unlimited bool
	// Replaces are the names of the rules this one replaces, when a
	// request's descriptors match both.
	Replaces []string
	// Shadow decides and counts, and answers OK.
	Shadow bool
	// Quota (quota_mode) decides and counts, and a descriptor over the
	// limit is answered OK with its limit and nothing left, and named
	// in the response's dynamic metadata; the request is not refused
	// for it. Shadow, when both are set, comes first.
	Quota bool
	// Detailed names the rule's statistics by the request's own values
	// (detailed_metric).
	Detailed bool
	// Algorithm is the floodgate algorithm: floodgate.FixedWindow unless
	// the file names another.
	Algorithm string
	// Burst is the buckets' capacity; 0 for the other algorithms, and
	// for a bucket whose file names none (RequestsPerUnit then).
	Burst int64
	// Index is the rule's place among its Config's rules, from 0 to
	// Len()-1, so that a server may keep each rule's state in a slice.
	Index int

	path   string // the place in the descriptor tree: domain and each level's key_value, length-prefixed
	shared uint64 // bit i: level i is a share_threshold wildcard (levels past 63 are not marked)
}

// SharedLevel reports whether level i (from 0) of the rule's place is a
// wildcard with share_threshold, whose matched values share one count
// (and, for detailed_metric, one name: the pattern's).
func (l *Limit) SharedLevel(i int) bool { return i >= 0 && i < 64 && l.shared&(1<<i) != 0 }

// node is one level of a domain's descriptors.
type node struct {
	children map[string]*node // by key, or key_value, where there are two or more
	oneKey   string           // the one child's key or key_value, where there is one
	one      *node            // the one child (a route's rule, under Envoy Gateway)
	wild     []wildEntry      // the children whose key_value holds a *, in file order
	limit    *Limit
	shared   string // share_threshold: the value pattern that the matched values share, as a key
}

// child is the child of key or key_value kv, or nil.
func (n *node) child(kv string) *node {
	if n.children == nil {
		if n.one != nil && n.oneKey == kv {
			return n.one
		}
		return nil
	}
	return n.children[kv]
}

// addChild adds c as the child kv, and reports false if n has a child
// kv already (which c then replaces: the load fails); siblings is how
// many children the list that holds c gives n (a merged domain's come
// from several). A map is written once a child, with no lookup before:
// a configuration of a million rules spends most of its load in them.
func (n *node) addChild(kv string, c *node, siblings int) bool {
	if n.children == nil && n.one == nil && siblings == 1 {
		n.oneKey, n.one = kv, c
		return true
	}
	if n.children == nil {
		if n.one != nil && n.oneKey == kv {
			return false
		}
		n.children = make(map[string]*node, max(siblings, 2)) // at its size: no rehash as it fills
		if n.one != nil {
			n.children[n.oneKey] = n.one
			n.oneKey, n.one = "", nil
		}
	}
	had := len(n.children)
	n.children[kv] = c
	return len(n.children) > had
}

// wildEntry is a child whose key_value is a pattern: its parts, split on
// each *, which matches any run of characters.
type wildEntry struct {
	key   string
	parts []string
}

// Config is a loaded configuration: every domain's descriptors. It does
// not change once loaded, and is safe for concurrent use.
type Config struct {
	domains map[string]*node
	rules   []*Limit // in load order: rules[l.Index] == l
}

// Entry is one entry of a request's descriptor.
type Entry struct {
	Key, Value string
}

// Load reads files into one Config. A domain may appear in one file
// only: it is Options{}.Load.
func Load(files []File) (*Config, error) { return Options{}.Load(files) }

// Options are how a configuration's files are read.
type Options struct {
	// MergeDomains lets a domain appear in several files, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: each file's
	// descriptors join the domain's, in file order, and a descriptor
	// that another file put at the same place (the same key and value
	// at the top of the domain) is an error, as it is within a file.
	// Without it, a domain in a second file is an error.
	MergeDomains bool
	// MaxBytes bounds the files' bytes together: more is an error
	// before any is read. 0 means DefaultMaxBytes.
	MaxBytes int
	// MaxDepth bounds how deep descriptors nest below their domain.
	// 0 means DefaultMaxDepth.
	MaxDepth int
	// MaxRules bounds the rules (rate_limits) of a configuration; 0
	// means none but MaxBytes's.
	MaxRules int
	// MaxMemory bounds what a configuration keeps in memory, in bytes,
	// as estimated from what it holds (its descriptors, its rules and
	// their keys, names and replaces) as it is read: a push's before
	// any of it is made (see LoadXDS), a file's as it loads. 0 means
	// none but MaxBytes's. A Config keeps some 330 bytes a rule of one
	// level, such as {key: client, value: c42, rate_limit: ...}, and
	// some 850 a rule as Envoy Gateway writes it (a route and its rule,
	// with long names); besides it, a Server keeps 8 bytes a rule, and
	// the state of the rules in use.
	MaxMemory int
	// Pace, if set, is called often while a configuration loads (before
	// each descriptor, and every 256 nodes of its YAML): a caller that
	// loads in the background while serving can pause there, so that the
	// load never takes the CPU that serving needs.
	Pace func()
}

// DefaultMaxBytes and DefaultMaxDepth are the bounds of an Options that
// names none. A configuration of a million rules is about 90 MB of YAML,
// and Envoy's descriptors are rarely more than a few entries deep.
const (
	DefaultMaxBytes = 128 << 20
	DefaultMaxDepth = 32
)

// maxDepth is o.MaxDepth, or its default.
func (o Options) maxDepth() int {
	if o.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return o.MaxDepth
}

// maxBytes is o.MaxBytes, or its default.
func (o Options) maxBytes() int {
	if o.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return o.MaxBytes
}

// Load reads files into one Config.
//
// What a configuration costs is bounded by its size: the files' bytes
// together may be at most MaxBytes, descriptors nest at most MaxDepth
// levels, and the rules' keys (each holds its ancestors' keys) may take
// at most four times the files' bytes. The YAML is read into a compact
// tree and refused as soon as it holds more nodes than a configuration
// of its size can (one per three bytes), so that loading a file costs
// a small multiple of its bytes, and an error costs no more.
func (o Options) Load(files []File) (*Config, error) {
	maxBytes := o.maxBytes()
	total := 0
	for _, f := range files {
		if total += len(f.Data); total > maxBytes {
			return nil, fmt.Errorf("%s: the configuration's files hold more than %d bytes together", f.Name, maxBytes)
		}
	}
	ld := o.loader(total)
	for _, f := range files {
		if err := ld.load(f); err != nil {
			return nil, err
		}
	}
	return ld.done(), nil
}

// loader is a load's loader, for a configuration of size bytes.
func (o Options) loader(size int) *loader {
	c := &Config{domains: map[string]*node{}}
	return &loader{c: c, merge: o.MergeDomains, maxDepth: o.maxDepth(), maxKey: 4*size + 64<<10, pace: o.Pace,
		maxRules: o.maxRules(), maxMemory: o.maxMemory()}
}

// done is the Config loaded.
func (ld *loader) done() *Config { return ld.c }

// Domains returns how many domains c holds.
func (c *Config) Domains() int { return len(c.domains) }

// Path returns the rule's place in the descriptor tree: its domain, and
// the key or key_value of each level down to the rule's own, as the
// configuration spells them (never a request's values).
func (l *Limit) Path() (domain string, levels []string) {
	domain, p, _ := CutField(l.path)
	for {
		field, rest, ok := CutField(p)
		if !ok {
			return domain, levels
		}
		levels, p = append(levels, field), rest
	}
}

// Level returns level i of the rule's place (from 0, the first below the
// domain) as Path does, without allocating; "" past the rule's depth.
func (l *Limit) Level(i int) string {
	_, p, _ := CutField(l.path)
	for ; ; i-- {
		field, rest, ok := CutField(p)
		if !ok {
			return ""
		}
		if i == 0 {
			return field
		}
		p = rest
	}
}

// AppendField appends s to dst as AppendKey writes each field of a key:
// its length as a uvarint, then its bytes, so that no two sequences of
// fields make one key.
func AppendField(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// CutField splits the first field off key, a key AppendKey or
// AppendField wrote; ok is false for an empty key or one they did not
// write.
func CutField(key string) (field, rest string, ok bool) {
	n, w := binary.Uvarint([]byte(key[:min(len(key), binary.MaxVarintLen64)]))
	if w <= 0 || uint64(len(key)-w) < n {
		return "", key, false
	}
	return key[w : w+int(n)], key[w+int(n):], true
}

// HasDomain reports whether c holds domain.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Len returns how many rules c holds, unlimited ones included.
func (c *Config) Len() int { return len(c.rules) }

// Rule returns the rule whose Index is i.
func (c *Config) Rule(i int) *Limit { return c.rules[i] }

// Same returns c's rule at the place l holds in its own Config's
// descriptor tree (the same domain, and the same key or key_value at
// every level), or nil: after a reload, the rule that l became.
func (c *Config) Same(l *Limit) *Limit {
	domain, p, _ := CutField(l.path)
	n := c.domains[domain]
	for n != nil {
		kv, rest, ok := CutField(p)
		if !ok {
			return n.limit
		}
		n, p = n.child(kv), rest
	}
	return nil
}

// Find returns the rule for a descriptor of domain, or nil: each entry
// is looked up at its level as key_value, then against the level's
// wildcard values in file order, then as its key alone; a rule applies
// only to a descriptor whose last entry reaches it.
func (c *Config) Find(domain string, entries []Entry) *Limit {
	l, _ := c.AppendKey(nil, domain, entries)
	return l
}

// AppendKey is Find that also appends to dst the key under which the
// rule counts this descriptor, when there is a rule (dst is returned
// unchanged when there is none): each entry's key and value, each
// prefixed by its length so that no two descriptors share a key by
// their separators, except that an entry matched by a share_threshold
// wildcard contributes the pattern, so that every value it matches
// shares one count.
func (c *Config) AppendKey(dst []byte, domain string, entries []Entry) (*Limit, []byte) {
	n := c.domains[domain]
	if n == nil {
		return nil, dst
	}
	start := len(dst)
	var buf [1 << 10]byte
	for i, e := range entries {
		kv := keyValue(&buf, e) // valid until the next entry: nothing keeps it
		next := n.child(kv)
		if next == nil {
			for _, w := range n.wild {
				if wildMatch(w.parts, kv) {
					next = n.child(w.key)
					break
				}
			}
		}
		if next == nil {
			next = n.child(e.Key)
		}
		if next == nil {
			return nil, dst[:start]
		}
		value := e.Value
		if next.shared != "" {
			value = next.shared
		}
		dst = AppendField(AppendField(dst, e.Key), value)
		if i == len(entries)-1 {
			if next.limit == nil {
				return nil, dst[:start]
			}
			return next.limit, dst
		}
		if next.one == nil && len(next.children) == 0 {
			return nil, dst[:start]
		}
		n = next
	}
	return nil, dst[:start]
}

// keyValue returns e's key_value, built in buf when it fits, so that a
// lookup allocates nothing. The string shares buf's bytes: it must not be
// kept past buf's next use.
func keyValue(buf *[1 << 10]byte, e Entry) string {
	if len(e.Key)+1+len(e.Value) > len(buf) {
		return e.Key + "_" + e.Value
	}
	kv := append(append(append(buf[:0], e.Key...), '_'), e.Value...)
	return unsafe.String(&kv[0], len(kv))
}

// wildMatch reports whether s matches the pattern split into parts at
// each *.
func wildMatch(parts []string, s string) bool {
	if len(parts) == 1 {
		return parts[0] == s
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(s) < len(first)+len(last) || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	rest := s[len(first) : len(s)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

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
