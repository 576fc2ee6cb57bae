package shardlog

import (
	"sync/atomic"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// Log is a lock-free exact sliding window log for one key: a request of
// cost n at t is allowed if and only if the cost admitted in (t − T, t]
// plus n is at most N. Entries are charged at max(t, newest entry's time),
// so the log's times never decrease: a request whose clock reading was
// overtaken by another's is admitted after it, at its time, and is checked
// against the window that ends there.
//
// Memory follows the live entries. The ring starts at two entries, grows
// to twice what it keeps when every entry it holds but the oldest is still
// in the window, and shrinks to four times what it keeps when fewer than a
// sixteenth are (the gap keeps a window that swings with its traffic from
// being copied back and forth). A copy keeps the oldest entry or the
// boundary, the entries that carry cost, and the newest: each of those
// costs at least 1 and the window holds at most W, so a grow keeps at most
// W+2 and the ring never needs more than the power of two at or above
// 2(W+2) entries of 16 bytes. W is N for a key that is only granted, and
// Params.Bound (256N, at most 4,194,302) for one that is charged: a key
// in debt, charged many small costs, can take that much, up to 2^23
// entries (128 MiB) at the largest bound; 2^23 is half the range of the
// entries' 24-bit index, which is what a ring may span.
// An idle log is retired by eviction, and its successor holds one entry. A
// ring is replaced by sealing its next slot (a CAS like a claim, so no
// claim can land after it) and copying its frozen entries; any goroutine
// that meets the seal finishes the copy, so a stalled one delays nobody.
//
// Speed. A grant whose window has room costs one 16-byte CAS and a few
// loads, from the Log's line to the head's slot and its neighbours
// (see Take); only a window within a request of full needs the boundary
// search, and a claim that loses its CAS carries on from the winner's
// entry; a call that loses twice steps aside (see stepAsideAfter) and
// reads the log again. Denials write nothing.
//
// Weighted cost. Each entry carries its cumulative cost, so one CAS admits
// a cost of any size exactly. Cumulative costs wrap at 2^38, far above any
// difference the log takes between two entries of one window (at most
// Params.Bound). A refund (the global cap refused the request, or a settle
// gives back an over-estimate) can change only the newest entry, since
// every later one counts from it: it gives back exactly what it names if
// the entry is still the newest, and otherwise lapses, and the key is
// then charged the whole cost, never less (see Refund and RefundGrant).
// A refund is a claim of its own (see refund), so it lands or lapses
// whole, whatever runs beside it.
//
// Debt. ChargeN takes a cost past the limit, up to Params.Bound in the
// window; the window then holds more than N, so every admission is
// refused until enough of it has aged out.
type Log struct {
	// head is a guess at the ring's head, packed with the log2 of the
	// capacity of the ring it was made on (see guess): a claim reads it
	// beside the ring's address and goes straight to the slots, with no
	// pointer to follow in between. A guess for a ring of another size is
	// ignored, and one that turns out ahead of the head sends the claim to
	// the ring's own hint. Claims write it, and it shares the line with the
	// fields below, which every request reads beside it: the Log is 64
	// bytes, which the allocator's 64-byte class aligns to a line, so that
	// a request reads one line of the Log, and no claim on a neighbouring
	// key's Log writes into it. (As 96 bytes, with the guess on a line of
	// its own, half the Logs shared a line with a neighbour's guess, as the
	// sliding-log-rebuilt run of 2026-12-01 measured.)
	head atomic.Uint64
	ring ringRef
	p    Params
	next atomic.Pointer[Log]
	_    [3]uint64
}

// The Log must stay within one line: this fails to compile if it grows
// past 64 bytes. (The pad makes it 64 on 64-bit platforms, where the Log
// serves; it is smaller on 32-bit ones.)
var _ = [1]struct{}{}[(unsafe.Sizeof(Log{})-1)/64]

// New returns an empty log for rule p, closed before now: a request with
// an earlier reading is charged at now.
func New(p Params, now int64) *Log {
	l := &Log{p: p}
	r := newRing(minRing)
	r.slot(0).ts.Store(uint64(now)) // the base entry: index 0, cost 0
	r.hint.Store(1)
	l.head.Store(guess(1, r.mask))
	l.ring.Store(r)
	return l
}

// NewSpent returns a log made at now that refuses every request until
// spent and answers as a new log from spent on: its window holds cost N
// charged at spent − T, and owed beyond it (the base entry, then one
// entry of cumulative cost N + owed, at most Bound, both at that time),
// so that a key evicted with Evict comes back without the room it had
// used, and owing what it owed. With spent ≤ now it is New(p, now).
func NewSpent(p Params, now, spent, owed int64) *Log {
	if spent <= now {
		return New(p, now)
	}
	return holding(p, p.enters(spent), p.spentCost(owed))
}

// holding returns a log closed before at whose window holds cost charged
// at at: the base entry, then, for a cost above 0, one entry of that
// cumulative cost, both at at.
func holding(p Params, at, cost int64) *Log {
	l := New(p, at)
	if cost <= 0 {
		return l
	}
	r := l.ring.Load()
	r.slot(1).ts.Store(uint64(at))
	r.slot(1).meta.Store(metaOf(1, uint64(cost)))
	r.hint.Store(2)
	l.head.Store(guess(2, r.mask))
	return l
}

// AllowN admits a request of cost n at now if the window holds room for
// it, and consumes nothing on denial. live is false once the log retired.
func (l *Log) AllowN(now, n int64) (Decision, bool) {
	for {
		if d, _, live, done := l.step(now, n, opAllow, nil); done {
			return d, live
		}
	}
}

// takeRing is the largest ring on which Take's one-entry bound cannot
// wrap (see Take).
const takeRing = 1 << 16

// Take is AllowN reduced to its verdict. A grant that one entry shows to
// fit is claimed here, with one 16-byte CAS and a handful of loads; the
// rest, and every denial, go through decide.
//
// The claim of head h overwrites entry lo = h − cap, the ring's oldest,
// whose cost counts in no window; it is allowed only if the next oldest,
// lo+1, has expired by the charged time too, since it becomes the oldest
// (before the ring first wraps, nothing is overwritten and entry 0, the
// base, is the oldest). That entry sits in slot h+1, beside the claimed
// one. Its cumulative cost is a lower bound on the boundary's, so
// prevCum − cum(lo+1) bounds the window's cost from above: if the request
// fits beside that bound, it fits. Only a window within n of full needs
// the exact boundary: Take then hands the view it read to decide, which
// searches from the tail hint. The bound spans up to cap − 2 entries of at
// most Params.Bound each, below 2^38, where cumulative counts wrap, only
// on rings of up to takeRing entries; on larger ones (windows of more
// than 2^15 entries) every claim goes through decide.
//
// Each slot is read meta first, then time, without a second look at the
// meta: the CAS on slot h checks the slot it writes, and claims are made
// in index order, so the entries before h and slot h+1 can be overwritten
// only after slot h has changed, when the CAS fails. A claim reads the
// head's slot before the newest's, and the newest's before the one before
// it (see refund): no entry's count changes once a claim has read it
// as the newest, and one that lands on an unsettled refund's entry goes
// to decide, which settles it first.
//
// A claim that loses its CAS carries on from the slot it lost: that slot
// now holds the winner's entry, the newest, and the head is the next. A
// call that loses twice steps aside (see stepAside), then reads the log
// afresh.
func (l *Log) Take(now, n int64) (allowed, live bool) {
	p := l.p // read once: other cores' claims write the line it sits on
	if n < 1 || n > p.limit {
		return l.takeSlow(now, n)
	}
	r, rmask := l.ring.loadMask()
	g := l.head.Load()
	h, mask := g>>6, uint64(1)<<(g&63)-1
	if mask != rmask {
		h, mask = r.hint.Load(), rmask // the guess is another ring's
	}
	exact := h // the guess: a claim of it at the first try is uncontended
	lost := 0
	for {
		// Skip the entries claimed since the guess moved: live, with the
		// index of their slot. (The address of each load does not depend
		// on the one before, so the loads overlap.)
		m := r.slotIn(h, mask).meta.Load()
		for m>>seqShift == h&seqMask {
			h++
			m = r.slotIn(h, mask).meta.Load()
		}
		if kindOf(m) != kindLive || (seqOf(m)-h)&seqMask < 1<<23 {
			// A seal, a retirement, or a slot a lap or more on.
			return l.takeSlow(now, n)
		}
		ts := r.slotIn(h, mask).ts.Load()
		pm := r.slotIn(h-1, mask).meta.Load()
		pts := int64(r.slotIn(h-1, mask).ts.Load())
		if pm>>seqShift != (h-1)&seqMask {
			h = r.hint.Load() // a lap went by since the scan, or the guess was ahead
			continue
		}
		charged := max(now, pts)
		// The entry that stays as the oldest: lo+1 once the ring has
		// wrapped, else the base.
		o := uint64(0)
		if h > mask {
			o = h - mask
		}
		om := r.slotIn(o, mask).meta.Load()
		ots := int64(r.slotIn(o, mask).ts.Load())
		if om>>seqShift != o&seqMask {
			h = r.hint.Load()
			continue
		}
		// Past takeRing, the bound below could wrap: decide searches.
		fits := mask < takeRing && (o == 0 || p.expired(ots, charged)) // else the ring is full of live entries
		if fits && (cumOf(pm)-cumOf(om))&cumMask+uint64(n) > uint64(p.limit) {
			fits = false // the window may be within n of full
		}
		if fits && shrinks(h, mask) {
			// Once a lap, decide shrinks a sparse ring.
			sparse, got := l.sparse(r, h, mask, pts)
			if !got {
				h = r.hint.Load()
				continue
			}
			fits = !sparse
		}
		if !fits {
			// decide needs the view consistent: the newest entry is read
			// again.
			if r.slotIn(h-1, mask).meta.Load() != pm {
				h = r.hint.Load()
				continue
			}
			return l.takeFrom(view{r: r, h: h, lo: lowest(h, mask), prevTs: pts, prevCum: cumOf(pm), curTs: ts, curMeta: m}, now, n)
		}
		if pp := r.slotIn(h-2, mask).meta.Load(); h >= 2 && pp>>seqShift == (h-2)&seqMask && below(cumOf(pm), cumOf(pp)) {
			return l.takeSlow(now, n) // the newest is unsettled: decide settles it
		}
		chaos.Yield()
		if cas128(r.slotIn(h, mask), ts, m, uint64(charged), metaOf(h, cumOf(pm)+uint64(n))) {
			l.advance(r, h, h == exact)
			return true, true
		}
		chaos.Lost("log.claim")
		exact = ^uint64(0) // contended: no claim of this call is exact
		if steppedAside(&lost) {
			return l.takeSlow(now, n) // the view is long stale: read afresh
		}
	}
}

// takeFrom is Take's path through decide, from the view v.
func (l *Log) takeFrom(v view, now, n int64) (allowed, live bool) {
	if _, allowed, live, done := l.decide(&v, now, n, opTake, nil); done {
		return allowed, live
	}
	return l.takeSlow(now, n)
}

// takeSlow is Take through step, for what the claim above leaves.
func (l *Log) takeSlow(now, n int64) (allowed, live bool) {
	for {
		if _, allowed, live, done := l.step(now, n, opTake, nil); done {
			return allowed, live
		}
	}
}

// Peek returns what AllowN(now, 1) would answer, and consumes nothing.
func (l *Log) Peek(now int64) (Decision, bool) {
	for {
		if d, _, live, done := l.step(now, 1, opPeek, nil); done {
			return d, live
		}
	}
}

// Refund gives back the whole cost of the newest entry if it is the one
// AllowN(now, n) just admitted: charged at now, with cost n, and not
// refunded since (or one like it: same time, same cost, which no window
// tells apart). Otherwise it does nothing: the key then keeps the charge
// (see Log). It always reports true: a retired log's successor holds no
// entry of this one's, so there is nothing to forward.
func (l *Log) Refund(now, n int64) bool {
	if n >= 1 {
		l.refund(now, uint64(n), uint64(n), 0, false, 0, nil)
	}
	return true
}

// LockFree reports whether Log is available on this machine: it needs a
// 16-byte CAS, which floodgate has on amd64 and arm64. Elsewhere MutexLog
// serves.
func LockFree() bool { return lockFreeLog }
