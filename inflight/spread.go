package inflight

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/word"
)

// A key taken and given back from several cores at once spreads: its word
// stays the one count of its slots, but each P gets a lane of the key, a
// ticket on a line of its own that holds at most one slot, still counted
// held in the word. A release on that P parks its slot there, and the
// next acquisition on that P lends it out again: the Slot it returns is
// the lane's ticket itself. So a hot key's request takes its slot with
// one CAS on its own P's line, and gives it back with one more, with no
// pooled ticket and no write to the word, the line that every core would
// write; the word changes only when a lane is empty or taken.
//
// Release once. A lane ticket's word is its state (empty, parked, lent)
// under a count of its loans; a release moves lent to parked (or empty)
// and the count on by one, in one CAS, so that a Slot is given back once
// and a stale copy of it, whose count is past, gives back nothing.
//
// Exactness. The word counts every slot in use or parked, and a slot is
// parked only by the release of one in use, so no more than the limit are
// ever in use. A parked slot is lent only while the word holds no more
// than the limit (held counts it, so one more in use stays within the
// limit, even just after SetLimit lowered it).
//
// No false refusal. An acquisition that finds the word full takes a
// parked slot from any lane, and refuses only if it found none and the
// word did not change meanwhile. A release parks only while the key holds
// at least a margin (a slot per lane) below its limit, and, having
// parked, looks at the word again: if the key came near its limit
// meanwhile, it takes its slot back from the lane and gives it back
// through the word, which tells a refusing acquisition to look again. So
// parked slots exist near the limit only when parked before the key got
// there, and an acquisition that misses them saw them taken.
//
// Only a Limiter with no queue and no global cap spreads (a queue's order
// and a global count are one word each anyway), and only a key whose word
// lost a CAS to another core, with a limit of at least twice the margin:
// at the first loss, since a wait for two losses in one acquisition left
// a key fought over by two cores unspread for whole runs (when the cores'
// CASes rarely overlapped twice), and a lost CAS on a key nobody shares
// is rare enough that the lanes it costs are few. A spread key's lanes (a line per P) live in the
// table's pointer beside its word; Held, Sweep, evictIdle, MaxKeys and
// SetLimit first give every parked slot back to the word (settle).
//
// Memory. At most maxSpread keys of a Limiter are spread at once: a
// client with many ids could make cores fight over each, and a line per P
// for each of MaxKeys keys is far more than their table. A key's lanes go
// with it when it is removed, and Sweep takes them from a key that stays
// (it holds a slot) but took no slot from them since the previous Sweep
// (unspread), so that keys that were hot once and hold long requests
// now do not keep the bound from the keys that are hot now.

//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

const (
	// spreadBit marks a spread key's word: its lanes hang beside it.
	spreadBit = 1 << 61
	// spreadAfter is how many CASes one acquisition loses before its key
	// spreads: the first.
	spreadAfter = 1
	// maxSpread is the most keys of a Limiter spread at once, so that
	// their lanes (64 bytes a P each) cost at most maxSpread × 64 ×
	// GOMAXPROCS bytes, whatever the keys: a client rotating ids could
	// otherwise spread every key it holds, and with MaxKeys of them hold
	// a line per P for each.
	maxSpread = 64
)

// A lane's ticket is in one of four states, in the low bits of its
// generation word; the bits above count its loans, as an ordinary
// ticket's generation counts its releases.
const (
	empty    = 0 // no slot here
	parked   = 1 // a slot held in the key's word and used by no request
	lent     = 2 // the slot is a request's: a Slot holds the ticket
	closed   = 3 // the key is being unspread: no slot parks or is lent here
	laneMask = 3
	laneGen  = 4 // one loan
)

// lanes is a spread key's parked slots, a lane per P.
type lanes struct {
	s []lane
}

// lane is one P's lane of a key, on a line of its own: a ticket that
// holds at most one slot, parked or lent out. A Slot lent from it is the
// ticket itself, so that a request takes and gives back a parked slot
// with one CAS each, on its own P's line, and no other ticket.
type lane struct {
	k       ticket      // lane is set, and l and id never change
	touched atomic.Bool // a slot was lent from here since the last sweep
	_       [64 - unsafe.Sizeof(ticket{}) - unsafe.Sizeof(atomic.Bool{})]byte
}

// A lane is one line: larger, two lanes would share one.
var _ = [1]struct{}{}[unsafe.Sizeof(lane{})-64]

// newLanes returns the lanes of key id.
func (l *Limiter) newLanes(id flat.ID) *lanes {
	sp := &lanes{s: make([]lane, l.ps)}
	for k := range sp.s {
		sp.s[k].k = ticket{lane: true, l: l, id: id}
	}
	return sp
}

// pid returns the caller's P, for its lane: a hint only (the goroutine
// may move on at once), since every lane operation is atomic.
func pid() int {
	p := procPin()
	procUnpin()
	return p
}

// spreadOf returns the lanes of the key at slot i of t, or nil if the
// key was removed meanwhile.
func spreadOf(t *flat.Table, i int) *lanes { return (*lanes)(t.Ptr(i)) }

// at returns P p's lane of sp.
func (sp *lanes) at(p int) *lane { return &sp.s[p%len(sp.s)] }

// lend lends the slot parked on the lane, if any, as a Slot.
func (ln *lane) lend() (Slot, bool) {
	k := &ln.k
	for {
		g := k.gen.Load()
		if g&laneMask != parked {
			return Slot{}, false
		}
		chaos.Yield()
		if k.gen.CompareAndSwap(g, g^parked|lent) {
			if !ln.touched.Load() {
				ln.touched.Store(true)
			}
			return Slot{t: k, gen: g ^ parked | lent}, true
		}
		chaos.Lost("inflight.lane")
	}
}

// lendParked lends a slot parked for the key at slot i of t, whose word
// was v: from the caller's lane, or from any if every is refused. The
// word must hold no more than the limit.
func (l *Limiter) lendParked(t *flat.Table, i int, v uint64, any bool) (Slot, bool) {
	sp := spreadOf(t, i)
	if sp == nil || held(v) > l.limit.Load() {
		return Slot{}, false
	}
	if !any {
		return sp.at(pid()).lend()
	}
	for k := range sp.s {
		if s, ok := sp.s[k].lend(); ok {
			return s, true
		}
	}
	return Slot{}, false
}

// near reports whether key id is too near its limit for a slot to be
// parked. A key that holds a slot is never removed; one that is gone (the
// caller's Slot is a stale copy, which its CAS will tell) is near.
func (l *Limiter) near(id flat.ID) bool {
	t, i := l.flat.Lookup(id)
	if i < 0 {
		return true
	}
	v := t.Word(i).Load()
	for v == word.Moved {
		if t, i = l.flat.Find(id); i < 0 {
			return true
		}
		v = t.Word(i).Load()
	}
	return word.IsMark(v) || v&waitMask != 0 || held(v)+l.margin > l.limit.Load()
}

// giveBack gives back the slot that lane ticket k lent as g: parked on
// the lane again, with one CAS, unless the key is near its limit; then
// through the word. It reports false for a slot already given back.
func (l *Limiter) giveBack(k *ticket, g uint64) bool {
	next := g&^laneMask + laneGen
	if l.near(k.id) {
		if !k.gen.CompareAndSwap(g, next|empty) {
			return false
		}
		l.release(k.id, -1)
		return true
	}
	if !k.gen.CompareAndSwap(g, next|parked) {
		return false
	}
	l.recheck(k, next)
	return true
}

// recheck follows a slot just parked in lane ticket k at generation g:
// if the key came near its limit meanwhile, an acquisition may be
// refusing right now, having looked at this lane before the slot was
// parked. The slot then leaves the lane through the word, whose change
// sends that acquisition to look again (unless it was lent meanwhile).
func (l *Limiter) recheck(k *ticket, g uint64) {
	if !l.near(k.id) {
		return
	}
	chaos.Yield()
	if k.gen.CompareAndSwap(g|parked, g|empty) {
		l.release(k.id, -1)
	}
}

// park parks a released slot of the key at slot i of t, whose word was v,
// on P p's lane (the caller's; any lane if p < 0) if that lane is empty,
// and reports whether it did; if not, the caller gives it back through
// the word.
func (l *Limiter) park(id flat.ID, t *flat.Table, i int, v uint64, p int) bool {
	if p < 0 {
		return false // from a lane's own give-back, which found the key near its limit
	}
	sp := spreadOf(t, i)
	if sp == nil || v&waitMask != 0 || held(v)+l.margin > l.limit.Load() {
		return false
	}
	k := &sp.at(p).k
	g := k.gen.Load()
	if g&laneMask != empty {
		return false
	}
	chaos.Yield()
	if !k.gen.CompareAndSwap(g, g|parked) {
		chaos.Lost("inflight.park")
		return false
	}
	l.recheck(k, g)
	return true
}

// settle gives every slot parked for the key at slot i of t back to its
// word, and returns the word and whether a lane was lent from since the
// last call that cleared the marks (clear). Under the key's shard lock,
// so the word is live.
func settle(t *flat.Table, i int, clear bool) (uint64, bool) {
	w := t.Word(i)
	sp := spreadOf(t, i)
	if sp == nil {
		return w.Load(), false
	}
	var n uint64
	touched := false
	for j := range sp.s {
		ln := &sp.s[j]
		for {
			g := ln.k.gen.Load()
			if g&laneMask != parked {
				break
			}
			chaos.Yield()
			if ln.k.gen.CompareAndSwap(g, g^parked|empty) {
				n++
				break
			}
			chaos.Lost("inflight.settle")
		}
		if clear {
			touched = ln.touched.Swap(false) || touched
		} else {
			touched = ln.touched.Load() || touched
		}
	}
	for {
		v := w.Load()
		if n == 0 {
			return v, touched
		}
		chaos.Yield()
		if w.CompareAndSwap(v, v-n) {
			return v - n, touched
		}
		chaos.Lost("inflight.settle")
	}
}

// parked returns the slots parked on sp's lanes now.
func (sp *lanes) parked() uint64 {
	n := uint64(0)
	for j := range sp.s {
		if sp.s[j].k.gen.Load()&laneMask == parked {
			n++
		}
	}
	return n
}

// spread gives key id its lanes and then marks its word, under its
// shard's lock, unless it has them already, was removed meanwhile, or
// maxSpread keys are spread already: a word marked spread always has its
// lanes.
func (l *Limiter) spread(id flat.ID) {
	l.flat.Update(id, func(t *flat.Table, i int, cur unsafe.Pointer, set func(unsafe.Pointer)) {
		if cur != nil {
			return
		}
		if l.spreading.Add(1) > maxSpread {
			l.spreading.Add(-1)
			return
		}
		set(unsafe.Pointer(l.newLanes(id)))
		w := t.Word(i)
		for {
			v := w.Load()
			chaos.Yield()
			if w.CompareAndSwap(v, v|spreadBit) {
				return
			}
			chaos.Lost("inflight.spread")
		}
	})
}

// spreadsAt reports whether a key may spread under limit: the Limiter has
// no queue and no global cap, the limit is at least twice the margin, and
// fewer than maxSpread keys are spread (checked again under the lock, so
// that a lost CAS takes no lock when they are).
func (l *Limiter) spreadsAt(limit uint64) bool {
	return l.spreads && limit >= 2*l.margin && l.spreading.Load() < maxSpread
}

// unspread takes away the lanes of the key at slot i of t, whose lanes
// are cur, as Update's fn (under the key's shard lock), unless a slot was
// lent from them since the last sweep cleared the marks, or one is lent
// now: the sweep found the key calm, but it holds a slot, so it stays
// (see Sweep). It closes every lane (a closed lane neither parks a slot
// nor lends one, so a goroutine that loaded the lanes before they went
// finds nothing there and goes through the word), gives the slots that
// were parked back to the word in the CAS that clears its spread mark,
// and then drops the lanes. A lane found lent while closing (lent just
// now) reopens the lanes closed before it, and the key stays spread.
func (l *Limiter) unspread(t *flat.Table, i int, cur unsafe.Pointer, set func(unsafe.Pointer)) {
	sp := (*lanes)(cur)
	if sp == nil {
		return // unspread or removed since the sweep
	}
	for j := range sp.s {
		if sp.s[j].touched.Load() || sp.s[j].k.gen.Load()&laneMask == lent {
			return
		}
	}
	var n uint64 // parked slots taken off the lanes
	mark := uint64(spreadBit)
	for j := range sp.s {
		k := &sp.s[j].k
		g := k.gen.Load()
		for g&laneMask != lent {
			chaos.Yield()
			if k.gen.CompareAndSwap(g, g&^laneMask|closed) {
				break
			}
			chaos.Lost("inflight.unspread")
			g = k.gen.Load()
		}
		if g&laneMask == lent {
			for c := range sp.s[:j] { // no one else changes a closed lane
				k := &sp.s[c].k
				k.gen.Store(k.gen.Load()&^laneMask | empty)
			}
			mark = 0
			break
		}
		if g&laneMask == parked {
			n++
		}
	}
	w := t.Word(i)
	for {
		v := w.Load()
		chaos.Yield()
		if w.CompareAndSwap(v, (v-n)&^mark) {
			break
		}
		chaos.Lost("inflight.unspread")
	}
	if mark != 0 {
		set(nil)
		l.spreading.Add(-1)
		l.unspreads.Add(1)
	}
}

// lanesPerKey is the lanes a spread key gets: one per P, as there may
// be at most that many at New (GOMAXPROCS raised later shares them).
func lanesPerKey() int { return max(runtime.GOMAXPROCS(0), 1) }

// spreadKeys returns the keys spread now.
func (l *Limiter) spreadKeys() int {
	n := 0
	if l.spreads {
		l.flat.DeleteIf(func(t *flat.Table, i int) bool {
			if v := t.Word(i).Load(); v&spreadBit != 0 && !word.IsMark(v) {
				n++
			}
			return false
		})
	}
	return n
}
