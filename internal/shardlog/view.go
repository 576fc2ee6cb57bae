package shardlog

import "github.com/floodgate-go/floodgate/internal/chaos"

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
