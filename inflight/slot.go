package inflight

import (
	"sync/atomic"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/flat"
)

// A Slot is one slot held: the right of one request of its key to run.
// Release gives it back. A Slot is a small value, and copies of it are the
// same slot: whichever copy is released first gives it back, and every
// other Release of it, before or after, is a no-op. The zero Slot holds
// nothing.
type Slot struct {
	t   *ticket
	gen uint64 // t's generation when the slot was issued
}

// ticket is where a held slot lives: its key, and a generation that its
// release moves on by one, in one CAS, so that a slot is released once
// and a stale copy of it, whose generation is past, releases nothing.
// Tickets are reused (see getTicket): a Slot costs no allocation.
//
// A ticket keeps no table: its release finds the key's word again by the
// key's identity, in the shard's current table (one probe, usually of the
// line the acquisition loaded). A table that a held slot pointed to would
// stay in memory as long as the slot is held, and with it every table its
// shard has had since (each points to its successor): under MaxKeys
// churn, a shard makes a new table every few thousand new keys, so one
// slot held for an hour would keep every one of them.
type ticket struct {
	gen  atomic.Uint64
	l    *Limiter
	id   flat.ID
	lane bool // a spread key's lane ticket (see lane): never pooled
}

// A ticket fits the allocator's 48-byte class (the figure the package's
// documentation gives): larger, this does not compile.
var _ [48 - unsafe.Sizeof(ticket{})]byte

// issue returns a Slot for the slot just taken on key id.
func (l *Limiter) issue(id flat.ID) Slot {
	k := getTicket()
	k.l, k.id = l, id
	return Slot{t: k, gen: k.gen.Load()}
}

// Release gives the slot back, and reports whether this call did: false
// for the zero Slot and for a slot already released. A slot is given to
// the first of its key's waiters, if any; otherwise it is free. Release
// never blocks on a waiter, works after the Limiter's Close, and may be
// called from any goroutine.
func (s Slot) Release() bool {
	k := s.t
	if k == nil {
		return false
	}
	if k.lane {
		return k.l.giveBack(k, s.gen)
	}
	if !k.gen.CompareAndSwap(s.gen, s.gen+1) {
		return false
	}
	l, id := k.l, k.id
	k.l = nil
	p := putTicket(k)
	l.release(id, p)
	return true
}
