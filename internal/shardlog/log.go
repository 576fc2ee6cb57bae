package shardlog

import (
	"math"
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

// view is one reading of a ring at its head.
type view struct {
	r       *logRing
	h       uint64 // the index the next entry gets
	lo      uint64 // the oldest entry held: a boundary, its cost in no window
	prevTs  int64  // the newest entry's time
	prevCum uint64 // and its cumulative cost
	curTs   uint64 // the raw content of slot h
	curMeta uint64
	from    uint64 // an entry known to count as expired, or 0
}

// look reads the ring's head. ok is false when the view was overtaken
// while it was being read; the caller reads again.
func (l *Log) look() (v view, ok bool) {
	r := l.ring.Load()
	h := r.hint.Load()
	for r.slot(h).meta.Load()>>seqShift == h&seqMask {
		h++ // claimed since the hint moved (see Take)
	}
	for {
		ts, m := read(r.slot(h))
		if ahead := (seqOf(m) - h) & seqMask; ahead < 1<<23 {
			// The slot holds entry h, or one a lap or more later when the
			// hint lags: either way the head is further on. A seal keeps
			// the index of the entry it closed over, a lap below its own,
			// so a seal met early names the head too. (An index behind h
			// or an empty slot means h is the head.)
			h += ahead + 1
			if kindOf(m) != kindLive {
				h += r.mask
			}
			continue
		}
		v = view{r: r, h: h, curTs: uint64(ts), curMeta: m}
		break
	}
	v.lo = lowest(v.h, r.mask)
	var got bool
	if v.prevTs, v.prevCum, got = r.entryAt(v.h - 1); !got {
		return v, false
	}
	return v, true
}

// boundary returns the newest entry expired at t, or lo if none after it
// is, with its cumulative cost. Times never decrease along the indices: it
// gallops forward from the tail hint, then bisects.
func (v *view) boundary(p *Params, t int64) (b, cum uint64, ok bool) {
	lo := max(v.lo, v.r.tail.Load(), v.from) // invariant: entry lo counts as expired
	if lo >= v.h {
		lo = max(v.lo, v.from) // the hint is from a lap this view has not seen: ignore it
	}
	hi := v.h - 1
	for step := uint64(1); lo < hi; step *= 2 { // gallop
		next := min(lo+step, hi)
		ts, _, got := v.r.entryAt(next)
		if !got {
			return 0, 0, false
		}
		if !p.expired(ts, t) {
			hi = next - 1
			break
		}
		lo = next
	}
	for lo < hi { // bisect
		mid := lo + (hi-lo+1)/2
		ts, _, got := v.r.entryAt(mid)
		if !got {
			return 0, 0, false
		}
		if p.expired(ts, t) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	_, cum, got := v.r.entryAt(lo)
	return lo, cum, got
}

// firstEnough returns the time of the first entry after the boundary b
// whose leaving brings the window's cost down by need: the entry whose
// expiry lets the request pass.
func (v *view) firstEnough(b, bCum, need uint64) (int64, bool) {
	lo, hi := b+1, v.h-1
	for lo < hi {
		mid := lo + (hi-lo)/2
		_, cum, got := v.r.entryAt(mid)
		if !got {
			return 0, false
		}
		if (cum-bCum)&cumMask >= need {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	ts, _, got := v.r.entryAt(lo)
	return ts, got
}

// outcome is what one evaluation of a request found.
type outcome struct {
	charged int64  // the time the request is charged at
	window  uint64 // cost admitted in the window that ends there
	bCum    uint64 // the boundary's cumulative cost
	b       uint64 // the boundary's index
}

// evaluate reads the window for a request at t. It reports ok false when
// the view turned stale and must be read again.
func (l *Log) evaluate(v *view, t int64) (o outcome, ok bool) {
	o.charged = max(t, v.prevTs)
	o.b, o.bCum, ok = v.boundary(&l.p, o.charged)
	o.window = (v.prevCum - o.bCum) & cumMask
	return o, ok
}

// refundOutcome is evaluate for a refund's claim at t, the newest entry's
// time, which always fits and answers nothing: of the window it needs
// only what the claim checks, whether the ring is full of live entries
// (the boundary is lo), and the entry's time. So it finds no boundary:
// b is lo, or lo + 1 when that entry has expired at the claim's time (a
// lower bound of the boundary, as evaluate's b is the boundary itself),
// which one entry's time tells; window is left 0.
func (l *Log) refundOutcome(v *view, t int64) (o outcome, ok bool) {
	o.charged, o.b = max(t, v.prevTs), v.lo
	if v.h <= v.r.mask || v.lo+1 >= v.h {
		// The ring has not wrapped (the slot to claim holds no entry), or
		// holds no entry after lo: either way b is lo.
		return o, true
	}
	ts, cum, got := v.r.entryAt(v.lo + 1)
	if !got {
		return o, false // the view is stale: the caller reads again
	}
	if l.p.expired(ts, o.charged) {
		o.b, o.bCum = v.lo+1, cum
	}
	return o, true
}

// decision builds the answer for a request of cost n at t; allowed says
// whether it was admitted (and the window then includes it).
func (l *Log) decision(v *view, o outcome, t, n int64, allowed bool) (Decision, bool) {
	d := Decision{Allowed: allowed, Limit: l.p.limit}
	w := int64(o.window)
	if allowed {
		d.Remaining = l.p.limit - w - n
		d.ResetAfter = l.p.after(o.charged, t)
		return d, true
	}
	d.Remaining = max(0, l.p.limit-w)
	d.Owed = max(0, w-l.p.limit)
	if w > 0 {
		d.ResetAfter = l.p.after(v.prevTs, t)
	}
	if n < 1 || n > l.p.limit {
		d.RetryAfter = Never
		return d, true
	}
	ts, ok := v.firstEnough(o.b, o.bCum, uint64(w+n-l.p.limit))
	d.RetryAfter = l.p.after(ts, t)
	return d, ok
}

// current returns a view of the live ring at its head, finishing any ring
// copy under way first; retired reports that the log has retired.
func (l *Log) current() (v view, retired bool) {
	for {
		v, ok := l.look()
		if !ok {
			continue
		}
		switch kindOf(v.curMeta) {
		case kindRetire:
			return v, true
		case kindGrow, kindShrink:
			l.help(&v)
			continue
		}
		return v, false
	}
}

// op is what one evaluation of a request does with it.
type op uint8

const (
	opAllow  op = iota // AllowN: claim what fits the limit, and answer
	opTake             // Take: claim what fits the limit
	opPeek             // Peek: answer only
	opCharge           // ChargeN: claim what fits the bound, and answer
	opRefund           // refund: claim an entry of cost −n at the newest's time (see refund)
)

// step is one attempt of AllowN, Take, Peek or ChargeN. done is false
// when the caller must try again; live is false when the log is retired.
// A grant or charge made writes its entry to *g, when g is not nil.
func (l *Log) step(t, n int64, op op, g *Grant) (d Decision, allowed, live, done bool) {
	v, retired := l.current()
	if retired {
		return d, false, false, true
	}
	return l.decide(&v, t, n, op, g)
}

// decide is step on the view v, read from a live ring. A charge that does
// not fit returns the window as it stands (see standing).
func (l *Log) decide(v *view, t, n int64, op op, g *Grant) (d Decision, allowed, live, done bool) {
	lost := 0
	for first := true; ; first = false {
		var o outcome
		var ok bool
		if op == opRefund {
			o, ok = l.refundOutcome(v, t)
		} else {
			o, ok = l.evaluate(v, t)
		}
		if !ok {
			return d, false, true, false
		}
		fits := l.p.fits(int64(o.window), n, op)
		if !fits || op == opPeek {
			switch op {
			case opAllow, opPeek:
				d, ok = l.decision(v, o, t, n, fits)
			case opCharge:
				d, ok = l.standing(v, o, t)
			}
			return d, fits, true, ok
		}
		if first && !v.settled() {
			return d, false, true, false
		}
		c := v.r.mask + 1
		if v.h >= c && o.b == v.lo {
			// The slot to claim holds the boundary, and no later entry has
			// expired: the ring is full of live entries. Grow it.
			l.seal(v, kindGrow)
			return d, false, true, false
		}
		if shrinks(v.h, v.r.mask) {
			sparse, got := l.sparse(v.r, v.h, v.r.mask, v.prevTs)
			if !got {
				return d, false, true, false
			}
			if sparse {
				l.seal(v, kindShrink)
				return d, false, true, false
			}
		}
		cum := v.prevCum + uint64(n)
		switch op {
		case opCharge:
			// Answered before the claim: once it lands, later claims may
			// overwrite the entries the answer reads.
			if d, ok = l.chargeDecision(v, o, t, n); !ok {
				return d, false, true, false
			}
		case opRefund:
			cum = v.prevCum - uint64(n)
		}
		newMeta := metaOf(v.h, cum)
		chaos.Yield()
		if cas128(v.r.slot(v.h), v.curTs, v.curMeta, uint64(o.charged), newMeta) {
			l.advance(v.r, v.h, first)
			// The boundary expired at this entry's time, which every later
			// charge is at least: it bounds every future search from below.
			// It moves on once it lags by tailEvery, so that claims near
			// the limit do not all write its line.
			if tail := v.r.tail.Load(); tail+tailEvery <= o.b {
				v.r.tail.CompareAndSwap(tail, o.b)
			}
			switch op {
			case opAllow:
				d, _ = l.decision(v, o, t, n, true)
			case opRefund:
				// The refund has landed; the entry it refunded, now the one
				// before the newest, is brought down to the newest's count
				// (see settled, which any claim runs if this one does not).
				chaos.Yield()
				cas128(v.r.slot(v.h-1), uint64(v.prevTs), metaOf(v.h-1, v.prevCum), uint64(v.prevTs), metaOf(v.h-1, cum))
			}
			if g != nil {
				*g = Grant{ts: o.charged, cum: cum & cumMask, cost: n}
			}
			return d, true, true, true
		}
		if op == opRefund {
			// Another entry, or a seal, took the slot: the entry to refund
			// may no longer be the newest. The caller reads the log again.
			chaos.Lost("log.refund")
			return d, false, true, false
		}
		chaos.Lost("log.step")
		if steppedAside(&lost) {
			return d, false, true, false // the view is long stale: read afresh
		}
		// Carry on from what the slot holds now: the winner's entry is the
		// newest, the next slot the head, and the boundary found is a lower
		// bound for the next search, whose window ends no earlier.
		if !v.moveOn(o.b) {
			return d, false, true, false
		}
	}
}

// moveOn moves the view on past its head, which another claim has just
// taken, keeping b as a lower bound for the boundary. It reports false if
// the slots moved on further, or if that claim was a refund's, whose
// entry before it may be unsettled: the caller reads the ring again.
func (v *view) moveOn(b uint64) bool {
	ts, m := read(v.r.slot(v.h))
	if m>>seqShift != v.h&seqMask || below(cumOf(m), v.prevCum) {
		return false
	}
	next, nm := read(v.r.slot(v.h + 1))
	if kindOf(nm) != kindLive || (seqOf(nm)-(v.h+1))&seqMask < 1<<23 {
		return false // a seal, or a slot already claimed
	}
	v.prevTs, v.prevCum = ts, cumOf(m)
	v.h++
	v.lo = lowest(v.h, v.r.mask)
	v.curTs, v.curMeta = uint64(next), nm
	v.from = b
	return true
}

// below reports whether cumulative count a is below b: a refund's entry
// is the only one whose count is below the entry's before it, by at most
// the bound, where every other difference between neighbours is a cost
// within it.
func below(a, b uint64) bool { return (a-b)&cumMask >= 1<<(cumBits-1) }

// settled reports whether the newest entry of v is settled: not a
// refund's entry whose refunded entry, the one before it, still carries
// the count from before the refund. If it is one, settled brings that
// count down to the newest's and reports false: the caller reads the ring
// again. A claim runs it first, so that no entry lands after an unsettled
// one, and only the newest can be unsettled: every reader but a claim
// takes such a pair as it is (see refund).
func (v *view) settled() bool {
	if v.h < 2 {
		return true // the base alone
	}
	j := v.h - 2
	m := v.r.slot(j).meta.Load()
	if m>>seqShift != j&seqMask {
		return false // a lap went by, or a seal: the view is stale
	}
	if !below(v.prevCum, cumOf(m)) {
		return true
	}
	chaos.Mark("log.settle")
	if ts, m2 := read(v.r.slot(j)); m2 == m {
		cas128(v.r.slot(j), uint64(ts), m, uint64(ts), metaOf(j, v.prevCum))
	}
	return false
}

// seal closes the ring at its head so that no claim can land after it.
func (l *Log) seal(v *view, kind uint64) {
	v.from = 0 // it holds for the request's time; help searches at the newest entry's
	if cas128(v.r.slot(v.h), v.curTs, v.curMeta, v.curTs, v.curMeta|kind<<kindShift) {
		v.curMeta |= kind << kindShift
		l.help(v)
	}
}

// help finishes replacing a sealed ring: it copies the frozen entries into
// a new ring and installs it, unless another goroutine already did. Every
// helper builds the same entries, so it does not matter whose copy wins.
func (l *Log) help(v *view) {
	first := v.lo
	if kindOf(v.curMeta) == kindShrink {
		// Keep what a window ending at the newest entry can need: its
		// boundary onwards. Every later window ends no earlier.
		b, _, ok := v.boundary(&l.p, v.prevTs)
		if !ok {
			return
		}
		first = b
	}
	// Copy the boundary, the newest entry, and every entry between that
	// carries a cost: entries whose cost was refunded take no room in the
	// new ring, so refunds cannot swell a log.
	type kept struct {
		ts  int64
		cum uint64
	}
	entries := make([]kept, 0, v.h-first)
	var prevCum uint64
	for j := first; j < v.h; j++ {
		ts, cum, ok := v.r.entryAt(j) // the sealed slot still holds entry lo
		if !ok {
			return // the view was stale: the caller reads again
		}
		if j == first || j == v.h-1 || cum != prevCum {
			entries = append(entries, kept{ts, cum})
		}
		prevCum = cum
	}
	// Twice the entries kept when growing; four times when shrinking, so
	// that a window that comes back to its size after a lull does not
	// grow the ring again at once (a shrink waits for a sixteenth).
	size, need := uint64(minRing), 2*uint64(len(entries))
	if kindOf(v.curMeta) == kindShrink {
		need *= 2
	}
	for size < need {
		size *= 2
	}
	nr := newRing(size)
	for i, e := range entries {
		nr.slot(uint64(i)).ts.Store(uint64(e.ts))
		nr.slot(uint64(i)).meta.Store(metaOf(uint64(i), e.cum))
	}
	nr.hint.Store(uint64(len(entries)))
	if l.ring.CompareAndSwap(v.r, nr) {
		l.head.Store(guess(uint64(len(entries)), nr.mask))
	}
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

// RetireIdle retires the log if at now it holds no cost in its window, as
// a new log would not, and reports whether it did. The successor is closed
// before now.
func (l *Log) RetireIdle(now int64) bool {
	for {
		v, retired := l.current()
		if retired {
			return false
		}
		o, ok := l.evaluate(&v, now)
		if !ok {
			continue
		}
		if o.window != 0 || v.prevTs > now {
			return false
		}
		if cas128(v.r.slot(v.h), v.curTs, v.curMeta, uint64(now), v.curMeta|kindRetire<<kindShift) {
			return true
		}
	}
}

// Retire retires the log whatever it holds; its successor is new.
func (l *Log) Retire() {
	for {
		v, retired := l.current()
		if retired || cas128(v.r.slot(v.h), v.curTs, v.curMeta, resetBits, v.curMeta|kindRetire<<kindShift) {
			return
		}
	}
}

// Evict retires the log for good, as Retire does (its successor is new),
// and returns what NewSpent needs to make it again. spent is the instant
// from which the log it held would answer as a new log made then would:
// every request is charged at the newest entry's time or later, so it is
// the time of the newest entry that carries cost in the window ending
// there, plus T; with no cost there, the newest entry's time itself (a
// log made then charges no earlier). It may lie in the past, where it
// still binds requests whose readings are older. owed is what the log
// owes at the reading now (or at its newest entry's time, if later): the
// log made again owes that until spent, which the debt, aging out with
// the entries that carry it, never passes. The reading and the
// retirement are one 16-byte CAS at the head, so no claim lands between
// them. (A refund that lands between them only lowers what the log held;
// the eviction counts as before it.) On a log already retired it returns
// math.MinInt64 and 0, and changes nothing.
func (l *Log) Evict(now int64) (spent, owed int64) {
	for {
		v, retired := l.current()
		if retired {
			return math.MinInt64, 0
		}
		o, ok := l.evaluate(&v, v.prevTs)
		if !ok {
			continue
		}
		spent, owed = v.prevTs, 0
		if o.window != 0 {
			// The first entry at which the cumulative cost reaches the
			// newest one's is the newest that carries cost.
			ts, ok := v.firstEnough(o.b, o.bCum, o.window)
			if !ok {
				continue
			}
			spent = l.p.leaves(ts)
			if now > v.prevTs {
				if o, ok = l.evaluate(&v, now); !ok {
					continue
				}
			}
			owed = max(0, int64(o.window)-l.p.limit)
		}
		chaos.Yield()
		if cas128(v.r.slot(v.h), v.curTs, v.curMeta, resetBits, v.curMeta|kindRetire<<kindShift) {
			return spent, owed
		}
		chaos.Lost("log.evict")
	}
}

// Successor returns the log that stands for a retired one: empty, closed
// before the instant the log was found idle, or new at now after a reset.
// Every call on a retired log returns the same *Log.
func (l *Log) Successor(now int64) *Log {
	if s := l.next.Load(); s != nil {
		return s
	}
	v, ok := l.look()
	for !ok {
		v, ok = l.look()
	}
	if kindOf(v.curMeta) != kindRetire {
		return New(l.p, now)
	}
	at := int64(v.curTs)
	if v.curTs == resetBits {
		at = now
	}
	s := New(l.p, at)
	if l.next.CompareAndSwap(nil, s) {
		return s
	}
	return l.next.Load()
}

// LockFree reports whether Log is available on this machine: it needs a
// 16-byte CAS, which floodgate has on amd64 and arm64. Elsewhere MutexLog
// serves.
func LockFree() bool { return lockFreeLog }
