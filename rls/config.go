package rls

import (
	"context"
	"time"

	"github.com/floodgate-go/floodgate/rls/internal/config"
)

// This file holds what a user of the package loads a configuration with
// (LoadOptions) and what it loads (Config, from Files); the model and
// the reader behind them are the package's own.

// Config is a configuration loaded by LoadOptions: envoyproxy/ratelimit's
// domains, their descriptors and their rules. A Server decides by one
// (New, SetConfig). A Config never changes once loaded, and several
// Servers may share one.
type Config struct{ c *config.Config }

// Domains returns how many domains c holds: 0 for a Config that no
// LoadOptions loaded.
func (c *Config) Domains() int {
	if c == nil || c.c == nil {
		return 0
	}
	return c.c.Domains()
}

// Rules returns how many rules (rate_limit) c holds, unlimited ones
// included: 0 for a Config that no LoadOptions loaded.
func (c *Config) Rules() int {
	if c == nil || c.c == nil {
		return 0
	}
	return c.c.Len()
}

// File is one configuration file: its name, for errors, and its bytes.
type File struct {
	Name string
	Data []byte
}

// LoadOptions are how a configuration's files, or an xDS push, are read.
// The zero value reads them as envoyproxy/ratelimit does, within the
// default bounds below.
type LoadOptions struct {
	// MergeDomains lets a domain appear in several files, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: each file's
	// descriptors join the domain's, in file order, and a descriptor
	// that another file put at the same place (the same key and value
	// at the top of the domain) is an error, as it is within a file.
	// Without it, a domain in a second file is an error.
	MergeDomains bool
	// MaxBytes bounds the files' bytes together: more is an error
	// before any is read. 0 means 128 MiB: a configuration of a million
	// rules is about 90 MB of YAML.
	MaxBytes int
	// MaxDepth bounds how deep descriptors nest below their domain. 0
	// means 32: Envoy's descriptors are rarely more than a few entries
	// deep.
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

// The errors, wrapped, of a configuration past a bound of LoadOptions.
var (
	// ErrTooLarge: a push whose YAML would be larger than MaxBytes.
	ErrTooLarge = config.ErrTooLarge
	// ErrTooManyRules: a configuration of more rules than MaxRules.
	ErrTooManyRules = config.ErrTooManyRules
	// ErrTooMuchMemory: a configuration that would keep more memory
	// than MaxMemory.
	ErrTooMuchMemory = config.ErrTooMuchMemory
)

// internal is o as the reader's Options.
func (o LoadOptions) internal() config.Options {
	return config.Options{MergeDomains: o.MergeDomains, MaxBytes: o.MaxBytes, MaxDepth: o.MaxDepth,
		MaxRules: o.MaxRules, MaxMemory: o.MaxMemory, Pace: o.Pace}
}

// wrap is c as a Config, or nil.
func wrap(c *config.Config) *Config {
	if c == nil {
		return nil
	}
	return &Config{c}
}

// Load reads files into one Config (see the package documentation for
// what a file holds). No files is a Config of no domains.
//
// What a configuration costs is bounded by its size: the files' bytes
// together may be at most MaxBytes, descriptors nest at most MaxDepth
// levels, and the rules' keys (each holds its ancestors' keys) may take
// at most four times the files' bytes. The YAML is read into a compact
// tree and refused as soon as it holds more nodes than a configuration
// of its size can (one per three bytes), so that loading a file costs
// a small multiple of its bytes, and an error costs no more.
func (o LoadOptions) Load(files []File) (*Config, error) {
	fs := make([]config.File, len(files))
	for i, f := range files {
		fs[i] = config.File(f)
	}
	c, err := o.internal().Load(fs)
	return wrap(c), err
}

// LoadXDS reads the resources of an xDS push into one Config: each is
// the bytes of a RateLimitConfig message, of type
// type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig, as
// Envoy Gateway serves them. A push loads as the YAML that
// envoyproxy/ratelimit converts it to would load, with the same checks
// and errors (an error names the resource by its place in the push and
// its name, and a file "xds:" and its name), but no text is written or
// read. When ctx ends first, LoadXDS returns ctx's cause
// (context.Cause), and no Config: a caller that must answer a push
// within a time gives it a deadline.
//
// A first reading of the bytes checks them and measures the push
// against its bounds before any of the Config is made, so that a push
// over one is refused at the cost of reading it: MaxBytes bounds its
// size as that YAML (ErrTooLarge); MaxDepth its nesting (and
// descriptors nest at most 64 levels on the wire whatever MaxDepth
// says); MaxRules its rules; and MaxMemory what the Config would keep,
// as estimated from what the push holds. The Config is then made one
// descriptor at a time from the bytes, so that what loading a push
// takes besides the push and the Config is a few nodes for each level
// of its deepest descriptor; a push whose bytes, with that, would be
// more than the Config keeps (and 1 MiB) is refused, so that a push
// never takes more than twice what it keeps to load. Every string must
// be UTF-8, as proto3's are. A field that the RateLimitConfig of
// go-control-plane's ratelimit module v0.1.0 does not have is an error,
// except quota_mode (7), which newer ones carry; metadata (8) is refused
// by name, as a file's is. A singular field given twice keeps its last
// value, as protobuf reads it, and a rate_limit given twice is an error
// (protobuf would merge the two).
func (o LoadOptions) LoadXDS(ctx context.Context, resources [][]byte) (*Config, error) {
	c, err := o.internal().LoadXDSContext(ctx, resources)
	return wrap(c), err
}

// ReadDir reads every regular file below dir, in every subdirectory, in
// the order of their paths: the files envoyproxy/ratelimit loads from
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY, whatever their
// extension. With ignoreDot (RUNTIME_IGNOREDOTFILES), files and
// directories whose names begin with a dot are left out. Symbolic links
// are followed, as a runtime root is usually one. Each File's Name is
// its path. Files that hold more than MaxBytes together are an error,
// and no more than that is read.
func (o LoadOptions) ReadDir(dir string, ignoreDot bool) ([]File, error) {
	fs, err := o.internal().ReadDir(dir, ignoreDot)
	if err != nil {
		return nil, err
	}
	files := make([]File, len(fs))
	for i, f := range fs {
		files[i] = File(f)
	}
	return files, nil
}

// Watch loads the configuration in dir (see ReadDir and Load) and passes
// it to apply, then looks at dir again on every tick, and loads and
// applies it again whenever a file was added, removed, changed, or
// swapped by a link. A load that fails passes its error, and apply keeps
// what it had (say, by calling the Server's ConfigFailed): the files are
// tried again when they next change. Write each file whole (to a
// temporary name outside dir, then renamed in), or swap the root's link:
// a file caught half-written fails to load, and loads at the next tick.
// Watch returns when ctx ends. Give it a time.Ticker's channel: a tick
// of 250 ms picks a change up within a second.
func (o LoadOptions) Watch(ctx context.Context, dir string, ignoreDot bool, ticks <-chan time.Time, apply func(*Config, error)) {
	o.internal().Watch(ctx, dir, ignoreDot, ticks, func(c *config.Config, err error) { apply(wrap(c), err) })
}
