package config

import (
	"context"
	"errors"
	"fmt"
	"unsafe"
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

// ErrTooLarge is the error, wrapped, of a push that LoadXDS refuses for
// its size: its YAML would be larger than MaxBytes allows.
var ErrTooLarge = errors.New("the push's configuration is larger than its bound on bytes allows")
