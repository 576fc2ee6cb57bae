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

// This file holds what a loaded configuration is: its files, its rules
// (Limit), the descriptor tree that holds them, and the Config.

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

// HasDomain reports whether c holds domain.
func (c *Config) HasDomain(domain string) bool { return c.domains[domain] != nil }

// Len returns how many rules c holds, unlimited ones included.
func (c *Config) Len() int { return len(c.rules) }

// Rule returns the rule whose Index is i.
func (c *Config) Rule(i int) *Limit { return c.rules[i] }
