package bucket

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/word"
)

// The methods below run a bucket whose state is one word held by the
// caller, in a slot of a table that many keys share (floodgate's flat
// registry), relative to an origin that the table holds for all of them.
// They apply the same transitions as Bucket and MutexBucket, so the three
// decide alike. Where Bucket retires itself and names a successor, an
// inline word reports a word.Status instead: the table's marks (Moved,
// Dead) say "find the key again", and a reading past the word's range says
// "move the table's origin" (see word).

// NewWord returns the word of a key that is created at now and is full
// from at on (at ≥ now: the latest eviction's instant, or what the key
// held when it was evicted at the bound). A reading too far from origin
// reports word.Early or word.Rebase, and no word.
func (p *Params) NewWord(origin, now, at int64) (uint64, word.Status) {
	if _, pos := p.ticks(now, origin); pos != inRange {
		return 0, p.status(pos)
	}
	t, pos := p.ticks(at, origin)
	if pos != inRange {
		// at lies beyond the range of origin and so of now: the key owes
		// more than any request at now can see. Hold it at the edge.
		t = maxT
	}
	return uint64(t), word.Live
}

func (p *Params) status(pos position) word.Status {
	if pos == tooEarly {
		return word.Early
	}
	return word.Rebase
}

// TakeWord is Bucket.Take on the word w.
func (p *Params) TakeWord(w *atomic.Uint64, origin, now, n int64) (allowed bool, st word.Status) {
	t, pos := p.ticks(now, origin)
	if pos == pastRange {
		return false, word.Rebase
	}
	for {
		v := w.Load()
		if word.IsMark(v) {
			return false, word.Gone
		}
		if pos != inRange || !p.validCost(n) {
			return false, word.Live
		}
		next, ok := p.take(int64(v), t, n)
		if !ok {
			return false, word.Live // a denial writes nothing
		}
		chaos.Yield()
		if w.CompareAndSwap(v, uint64(next)) {
			return true, word.Live
		}
		chaos.Retried()
	}
}

// AllowWord is Bucket.AllowN on the word w.
func (p *Params) AllowWord(w *atomic.Uint64, origin, now, n int64) (Decision, word.Status) {
	t, pos := p.ticks(now, origin)
	if pos == pastRange {
		return Decision{}, word.Rebase
	}
	for {
		v := w.Load()
		switch {
		case word.IsMark(v):
			return Decision{}, word.Gone
		case pos != inRange:
			return p.outOfRange(), word.Live
		case !p.validCost(n):
			return p.denied(int64(v), t, n), word.Live
		}
		next, ok := p.take(int64(v), t, n)
		if !ok {
			return p.denied(int64(v), t, n), word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, uint64(next)) {
			return p.granted(next, t), word.Live
		}
		chaos.Retried()
	}
}

// ChargeWord is Bucket.ChargeN on the word w. A reading past the word's
// range reports word.Rebase, and a mark word.Gone, with no error; a
// reading too far before the origin returns ErrEarlyCharge (word.Live),
// n < 1 an error, and a charge past the bound an error wrapping
// ErrDebtBound. In each of those cases nothing is charged.
func (p *Params) ChargeWord(w *atomic.Uint64, origin, now, n int64) (Decision, word.Status, error) {
	t, pos := p.ticks(now, origin)
	if pos == pastRange {
		return Decision{}, word.Rebase, nil
	}
	for {
		v := w.Load()
		switch {
		case word.IsMark(v):
			return Decision{}, word.Gone, nil
		case pos != inRange:
			return Decision{}, word.Live, ErrEarlyCharge
		}
		next, ok := p.charge(int64(v), t, n)
		if !ok {
			return Decision{}, word.Live, p.chargeError(int64(v), t, n)
		}
		chaos.Yield()
		if w.CompareAndSwap(v, uint64(next)) {
			return p.charged(next, t), word.Live, nil
		}
		chaos.Retried()
	}
}

// PeekValue is what Bucket.Peek answers for a bucket whose word is v.
func (p *Params) PeekValue(v uint64, origin, now int64) Decision {
	t, pos := p.ticks(now, origin)
	d, _ := p.peek(int64(v), t, pos)
	return d
}

// RefundWord is Bucket.Refund on the word w. Gone means the word was
// marked: the caller follows Moved to the key's new slot, and drops the
// refund after Dead (the key was removed, and what it is created as again
// never holds more than the removed state).
func (p *Params) RefundWord(w *atomic.Uint64, n int64) word.Status {
	for {
		v := w.Load()
		if word.IsMark(v) {
			return word.Gone
		}
		next, _ := p.refund(int64(v), n)
		if next == int64(v) {
			return word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, uint64(next)) {
			return word.Live
		}
		chaos.Retried()
	}
}

// SettleWord gives n back to the word w, as RefundWord does, and returns
// the bucket's state at now after it, as a settlement answers it (what
// PeekValue answers of the value the refund left, its peeked unit not
// taken: Allowed, and Remaining the whole tokens held), in one step. ok is
// false, and nothing is given back, when w holds a mark or a retired
// state, or now lies outside the word's range: the caller then takes
// RefundWord's path.
func (p *Params) SettleWord(w *atomic.Uint64, origin, now, n int64) (d Decision, ok bool) {
	t, pos := p.ticks(now, origin)
	if pos != inRange {
		return Decision{}, false
	}
	for {
		v := w.Load()
		if word.IsMark(v) || isRetired(int64(v)) {
			return Decision{}, false
		}
		next, _ := p.refund(int64(v), n)
		if next != int64(v) {
			chaos.Yield()
			if !w.CompareAndSwap(v, uint64(next)) {
				chaos.Retried()
				continue
			}
		}
		d, _ = p.peek(next, t, inRange)
		if d.Allowed {
			d.Remaining++ // the peeked unit is not taken
		}
		d.Allowed = true
		return d, true
	}
}

// RetireIdleWord marks w Dead if the bucket is full at now, as a new one
// is, and reports whether it did.
func (p *Params) RetireIdleWord(w *atomic.Uint64, origin, now int64) bool {
	t, pos := p.ticks(now, origin)
	return word.RetireIf(w, func(v uint64) bool {
		_, ok := p.retireIdle(int64(v), t, pos)
		return ok
	})
}

// EvictWord marks w Dead whatever it holds, and returns the instant from
// which the bucket it held would have been full (SpentValue), in the same
// step: no grant lands between the reading and the mark.
func (p *Params) EvictWord(w *atomic.Uint64, origin int64) int64 {
	at, _ := word.Evict(w, func(v uint64) (int64, int64) { return p.SpentValue(v, origin), 0 })
	return at
}

// SpentValue returns the instant from which a bucket whose word is v is
// full again (its TAT, in nanoseconds on the clock's scale), rounded up.
// It may lie in the past: a request whose reading is older still finds
// the bucket owing until then.
func (p *Params) SpentValue(v uint64, origin int64) int64 {
	tat := int64(v)
	ns := tat / p.scale // rounds towards zero: up for a TAT after the origin
	if tat > 0 && tat%p.scale != 0 {
		ns++
	}
	switch {
	case ns > 0 && origin > math.MaxInt64-ns:
		return math.MaxInt64
	case ns < 0 && origin < math.MinInt64-ns:
		return math.MinInt64 // full before the clock's first instant
	}
	return origin + ns
}

// RebaseWord translates a live word from origin from to a later origin
// to. A TAT that falls below the floor was full long ago, and stays full.
func (p *Params) RebaseWord(v uint64, from, to int64) uint64 {
	floor := int64(floorTAT)
	shift := uint64(to) - uint64(from) // to > from: the difference fits in uint64
	if shift > uint64(maxT/p.scale) {
		return uint64(floor)
	}
	return uint64(max(int64(v)-int64(shift)*p.scale, floor))
}

// ReserveWord is Bucket.ReserveN on the word w; tat is the word it left.
// A reading past the word's range reports word.Rebase, and a mark
// word.Gone; nothing changes then.
func (p *Params) ReserveWord(w *atomic.Uint64, origin, now, n int64, maxWait time.Duration) (wait time.Duration, tat uint64, ok bool, st word.Status) {
	t, pos := p.ticks(now, origin)
	if pos == pastRange {
		return 0, 0, false, word.Rebase
	}
	limit := p.waitTicks(maxWait)
	for {
		v := w.Load()
		if word.IsMark(v) {
			return 0, 0, false, word.Gone
		}
		if pos != inRange || !p.validCost(n) {
			return 0, 0, false, word.Live
		}
		next, ticks, ok := p.reserve(int64(v), t, n, limit)
		if !ok {
			return p.duration(ticks), 0, false, word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, uint64(next)) {
			return p.duration(ticks), uint64(next), true, word.Live
		}
		chaos.Retried()
	}
}

// CancelWord is Bucket.CancelReservation on the word w. A mark reports
// word.Gone: the key moved, and its word must be found again (a resize
// copies it unchanged).
func (p *Params) CancelWord(w *atomic.Uint64, tat uint64, n int64) (done bool, st word.Status) {
	for {
		v := w.Load()
		if word.IsMark(v) {
			return false, word.Gone
		}
		next, ok := p.cancel(int64(v), int64(tat), n)
		if !ok {
			return false, word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, uint64(next)) {
			return true, word.Live
		}
		chaos.Retried()
	}
}
