package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
)

// This file reads a push's messages (RateLimitConfig, RateLimitDescriptor
// and RateLimitPolicy): the first reading checks them and measures them
// against the bounds, and the second makes each descriptor's nodes.

// xdsUnits name the units by number: the types' enum ends at DAY, and
// the server may send the rest.
var xdsUnits = [...]string{1: "second", 2: "minute", 3: "hour", 4: "day", 5: "month", 6: "year", 7: "week"}

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
