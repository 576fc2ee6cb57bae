package inflight

import (
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/word"
)

// A key's state is one word, inline in the flat table beside the key's
// identity:
//
//	bit 62       touched: set by every acquisition, cleared by the sweeper
//	bit 61       spread: the key has lanes (see spread.go)
//	bits 31..60  the waiters queued for the key (see queue.go)
//	bits 0..30   the slots held, parked ones included
//
// Bit 63 is always clear, so that a state is never one of the table's
// marks (word.Moved, word.Dead), whose top two bits are 10.
//
// The protocol. An acquisition CASes held up by one, only while no waiter
// is queued and fewer than the limit are held; a release CASes it down by
// one, only while no waiter is queued. While a waiter is queued, held is
// the limit and the word changes only under the key's queue lock: a
// release then hands its slot to the first waiter (waiters down by one,
// held unchanged), a waiter that gives up takes itself off (waiters down
// by one), and a newcomer that must wait queues (waiters up by one). So
// the fast paths take no lock, and no acquisition overtakes a waiter.
//
// A word that holds nothing (held and waiters 0) is the state a new key
// would get: it may be removed (evictIdle, Sweep, MaxKeys), by a CAS
// to word.Dead that no acquisition can slip under. A word that holds
// anything is never removed.
const (
	heldMask = 1<<31 - 1
	waitOne  = 1 << 31
	waitMask = maxQueue << 31
	touched  = 1 << 62

	// MaxLimit is the largest Limit and Global (the width of the count
	// of slots held in the key's word).
	MaxLimit = heldMask
	// maxQueue is the largest Queue (the width of the count of waiters
	// in the key's word).
	maxQueue = 1<<30 - 1
)

// held returns the slots held in state v.
func held(v uint64) uint64 { return v & heldMask }

// waiting returns the waiters queued in state v.
func waiting(v uint64) uint64 { return (v & waitMask) >> 31 }

// idle reports whether state v holds nothing: no slot, no waiter.
func idle(v uint64) bool { return v&^(touched|spreadBit) == 0 }

// refusal is why an acquisition did not take a slot.
type refusal uint8

const (
	granted    refusal = iota
	keyFull            // every slot held, or waiters queued before it
	keysFull           // MaxKeys reached, and every key held busy
	globalFull         // the global cap's slots are all held
)

// take takes one slot of key id, creating its word on first use. It
// returns the Slot if a spread key's lane lent it (the zero Slot if the
// word gave it), or why it could not.
func (l *Limiter) take(id flat.ID) (Slot, refusal) {
	t := l.flat.Current(id)
	i := t.Lookup(id)
	lost := 0
	for {
		if i < 0 {
			if t, i = l.create(id); i < 0 {
				return Slot{}, keysFull
			}
		}
		w := t.Word(i)
		v := w.Load()
		full := v&waitMask != 0 || held(v) >= l.limit.Load()
		switch {
		case word.IsMark(v):
			i = -1 // moved by a resize or removed while idle: find it again
			continue
		case v&spreadBit != 0:
			if s, ok := l.lendParked(t, i, v, full); ok {
				return s, granted
			}
			if full && w.Load() == v {
				return Slot{}, keyFull
			}
			if full {
				continue // a slot came back through the word meanwhile: look again
			}
		case full:
			return Slot{}, keyFull
		}
		chaos.Yield()
		if w.CompareAndSwap(v, (v+1)|touched) {
			return Slot{}, granted
		}
		chaos.Lost("inflight.take")
		if lost++; lost == spreadAfter && v&spreadBit == 0 && l.spreadsAt(l.limit.Load()) {
			l.spread(id)
		}
	}
}

// create finds or creates key id's word under its shard's lock. The slot
// is -1 when the table is at MaxKeys and every key in the shard holds a
// slot or a waiter.
func (l *Limiter) create(id flat.ID) (*flat.Table, int) {
	t, i := l.flat.Insert(id, 0, func(*flat.Table) (uint64, unsafe.Pointer, bool) { return 0, nil, true })
	if i >= 0 && l.spreadAll {
		l.spread(id)
	}
	return t, i
}

// putBack gives back one slot of key id, unless a waiter is queued and
// the key holds no more than the limit: it then reports false, and the
// caller hands the slot over under the queue's lock. A key that holds a
// slot is never removed, so its word is in the shard's current table,
// live or moved by a resize to the table's successor.
func (l *Limiter) putBack(id flat.ID, p int) bool {
	t, i := l.flat.Lookup(id)
	for {
		if i < 0 {
			panic("inflight: a slot was released on a key that is not held") // a broken invariant, never a caller's input
		}
		w := t.Word(i)
		v := w.Load()
		switch {
		case v == word.Moved:
			t, i = l.flat.Find(id)
			continue
		case word.IsMark(v) || held(v) == 0:
			panic("inflight: a slot was released on a key that holds none") // a broken invariant, never a caller's input
		case v&waitMask != 0 && held(v) <= l.limit.Load():
			return false // hand it to the first waiter (above a lowered limit, it goes back)
		case v&spreadBit != 0 && l.park(id, t, i, v, p):
			return true
		}
		chaos.Yield()
		if w.CompareAndSwap(v, v-1) {
			return true
		}
		chaos.Lost("inflight.release")
	}
}

// retireIdle is the registry's Retire hook: it removes a key that holds
// nothing, in one CAS that no acquisition slips under, having given back
// its parked slots. Under the key's shard lock, so that its spread mark
// does not change meanwhile.
func (l *Limiter) retireIdle(t *flat.Table, i int) bool {
	spread := false
	if v := t.Word(i).Load(); v&spreadBit != 0 && !word.IsMark(v) {
		spread = true
		settle(t, i, false)
	}
	if !word.RetireIf(t.Word(i), idle) {
		return false
	}
	if spread {
		l.spreading.Add(-1) // its lanes go with it
	}
	return true
}

// retireUntouched is the sweeper's: it removes a key that holds nothing
// and has not been acquired since the previous sweep, and clears the
// touched mark of every other, so that a key is removed after one whole
// sweep period without an acquisition. A spread key gives back its parked
// slots first; a slot taken from a lane touches it too. A spread key that
// stays though no slot was taken from its lanes since the previous sweep
// (it holds slots, but is not hot) is added to calm, for Sweep to
// unspread.
func (l *Limiter) retireUntouched(t *flat.Table, i int, calm *[]flat.ID) bool {
	w := t.Word(i)
	spread, laned := false, false
	if v := w.Load(); v&spreadBit != 0 && !word.IsMark(v) {
		spread = true
		_, laned = settle(t, i, true)
	}
	for {
		v := w.Load()
		switch {
		case word.IsMark(v):
			return false
		case idle(v) && v&touched == 0 && !laned:
			chaos.Yield()
			if w.CompareAndSwap(v, word.Dead) {
				if spread {
					l.spreading.Add(-1) // its lanes go with it
				}
				return true
			}
		case v&touched != 0:
			chaos.Yield()
			if !w.CompareAndSwap(v, v&^touched) {
				break
			}
			fallthrough
		default:
			if spread && !laned {
				*calm = append(*calm, t.ID(i))
			}
			return false
		}
		chaos.Lost("inflight.sweep")
	}
}
