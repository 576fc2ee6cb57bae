package config

import (
	"encoding/binary"
	"errors"
	"unsafe"
)

// This file bounds what a configuration may cost: its rules, and the
// memory it keeps, estimated from what it holds as it is read (a push's
// before any of it is made), so that one over a bound is refused before
// it costs what it would keep.

// ErrTooManyRules is the error, wrapped, of a configuration that holds
// more rules than MaxRules allows.
var ErrTooManyRules = errors.New("the configuration holds more rules than its bound allows")

// ErrTooMuchMemory is the error, wrapped, of a configuration that would
// keep more memory than MaxMemory allows.
var ErrTooMuchMemory = errors.New("the configuration would take more memory than its bound allows")

// What the parts of a Config take on the heap, in bytes. slotBytes is a
// child's share of its parent's map (its key's header, its pointer,
// its control byte, and the table's free room): TestCostEstimate holds
// the estimate to what a load keeps.
const (
	nodeBytes  = int(unsafe.Sizeof(node{}))
	limitBytes = int(unsafe.Sizeof(Limit{}))
	wildBytes  = int(unsafe.Sizeof(wildEntry{}))
	strBytes   = int(unsafe.Sizeof(""))
	slotBytes  = 40
	ruleSlot   = 8 + 2 // the Config's list of rules: a pointer, and what append leaves free
)

// allocBytes is what the heap takes for an object of n bytes: its size
// class, approximately (classes are 16 bytes apart up to 256, and about
// an eighth apart above).
func allocBytes(n int) int {
	switch {
	case n <= 0:
		return 0
	case n <= 8:
		return 8
	case n <= 256:
		return (n + 15) &^ 15
	}
	return n + n/8
}

// descCost is what the Config keeps for one descriptor, from what it
// holds: its key_value's length and its *s (a wildcard's pattern is
// kept in parts), how many siblings its list holds (two or more are a
// map, where it takes a slot); for a rule, the length of its key and
// path, of its name, and its replaces (how many, and their names'
// allocBytes together).
type descCost struct {
	kv, stars, siblings              int
	rule                             bool
	keyPath, name, replaces, repline int
}

// bytes is the estimate.
func (d *descCost) bytes() int {
	c := nodeBytes
	if d.siblings > 1 {
		c += slotBytes
	}
	if d.rule {
		c += allocBytes(d.keyPath) + limitBytes + ruleSlot + allocBytes(d.name)
		if d.replaces > 0 {
			c += allocBytes(d.replaces*strBytes) + d.repline
		}
	} else {
		c += allocBytes(d.kv)
	}
	if d.stars > 0 {
		c += wildBytes + allocBytes((d.stars+1)*strBytes)
	}
	return c
}

// fieldLen is the length of a field that AppendField writes for s of n
// bytes.
func fieldLen(n int) int {
	var b [binary.MaxVarintLen64]byte
	return binary.PutUvarint(b[:], uint64(n)) + n
}

// maxRules and maxMemory are o's bounds: 0 for none.
func (o Options) maxRules() int  { return max(o.MaxRules, 0) }
func (o Options) maxMemory() int { return max(o.MaxMemory, 0) }
