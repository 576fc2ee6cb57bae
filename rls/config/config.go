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
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"
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
