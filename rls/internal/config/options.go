package config

import "fmt"

// This file holds how a configuration's files are read (Options) and the
// defaults of its bounds, and loads files into a Config (Load).

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
