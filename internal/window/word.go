package window

import (
	"math"
	"math/bits"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/word"
)

// The methods below run a window whose state is one word held by the
// caller, in a slot of a table that many keys share (floodgate's flat
// registry), relative to an origin window index that the table holds for
// all of them. They apply the same transitions as Window and MutexWindow;
// where those retire and name a successor, an inline word reports a
// word.Status, as the bucket package's inline words do.

// Origin returns the window index of now: the origin of a table that
// holds window words.
func (p *Params) Origin(now int64) int64 {
	k, _ := floorDivMod(now, p.period)
	return k
}

// NewWord returns the word of a key created at now: closed before the
// window of at (at ≥ now: the latest eviction's instant), and, when
// spent > at, as full as a state that is new only from spent on can be,
// owing owed beyond it (a key evicted at the bound: see SpentOwed).
func (p *Params) NewWord(origin, now, at, spent, owed int64) (uint64, word.Status) {
	if _, _, pos := p.locate(now, origin); pos != inRange {
		return 0, p.status(pos)
	}
	rel, _, pos := p.locate(at, origin)
	if pos != inRange {
		rel = p.maxRel
	}
	w := p.pack(rel, 0, 0)
	if spent > at {
		// Window ks held N: it is closed before ks, refuses all of ks,
		// and (sliding) weighs N in ks+1; it answers as new from spent.
		// What it owed is counted beyond N (fixed), or as the previous
		// window's count (sliding; see SpentOwed).
		k, _ := floorDivMod(spent, p.period)
		ks := k - p.lag()
		if r := ks - origin; r >= rel-1 {
			w = p.spentWord(min(r, p.maxRel), owed)
		}
	}
	return w, word.Live
}

// spentWord is the word, at window rel, of a state spent until the end of
// the window in which its count last weighs, owing owed (see SpentOwed).
func (p *Params) spentWord(rel, owed int64) uint64 {
	owed = max(0, owed)
	if p.kind == Sliding {
		// The previous count first; a debt above what it holds (two
		// windows' counts in debt) goes to the current one.
		prev := min(owed, p.MaxCount())
		return p.pack(rel, p.limit+min(owed-prev, p.MaxCount()-p.limit), prev)
	}
	return p.pack(rel, p.limit+min(owed, p.MaxCount()-p.limit), 0)
}

// lag is how many windows after its own a count still weighs, plus one.
func (p *Params) lag() int64 {
	if p.kind == Sliding {
		return 2
	}
	return 1
}

func (p *Params) status(pos position) word.Status {
	if pos == tooEarly {
		return word.Early
	}
	return word.Rebase
}

// TakeWord is Window.Take on the word w.
func (p *Params) TakeWord(w *atomic.Uint64, origin, now, n int64) (allowed bool, st word.Status) {
	rel, e, pos := p.locate(now, origin)
	if pos == pastRange {
		return false, word.Rebase
	}
	for {
		v := w.Load()
		if word.IsMark(v) {
			return false, word.Gone
		}
		if pos != inRange {
			return false, word.Live
		}
		next, allowed, _ := p.admit(v, rel, e, pos, n)
		if next == v {
			return allowed, word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, next) {
			return allowed, word.Live
		}
		chaos.Retried()
	}
}

// AllowWord is Window.AllowN on the word w.
func (p *Params) AllowWord(w *atomic.Uint64, origin, now, n int64) (Decision, word.Status) {
	rel, e, pos := p.locate(now, origin)
	if pos == pastRange {
		return Decision{}, word.Rebase
	}
	for {
		v := w.Load()
		if word.IsMark(v) {
			return Decision{}, word.Gone
		}
		next, d, _ := p.allow(v, rel, e, pos, n)
		if next == v {
			return d, word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, next) {
			return d, word.Live
		}
		chaos.Retried()
	}
}

// PeekValue is what Window.Peek answers for a window whose word is v.
func (p *Params) PeekValue(v uint64, origin, now int64) Decision {
	rel, e, pos := p.locate(now, origin)
	d, _ := p.peek(v, rel, e, pos)
	return d
}

// ChargeWord is Window.ChargeN on the word w. With an error (n < 1, or a
// charge past MaxCount) nothing changed and the status is Live.
func (p *Params) ChargeWord(w *atomic.Uint64, origin, now, n int64) (Decision, word.Status, error) {
	if err := checkCharge(n); err != nil {
		return Decision{}, word.Live, err
	}
	rel, e, pos := p.locate(now, origin)
	if pos == pastRange {
		return Decision{}, word.Rebase, nil
	}
	for {
		v := w.Load()
		if word.IsMark(v) {
			return Decision{}, word.Gone, nil
		}
		next, d, _, err := p.charge(v, rel, e, pos, n)
		if next == v {
			return d, word.Live, err
		}
		chaos.Yield()
		if w.CompareAndSwap(v, next) {
			return d, word.Live, nil
		}
		chaos.Retried()
	}
}

// RefundWord is Window.Refund on the word w, for a grant or a charge at
// now.
func (p *Params) RefundWord(w *atomic.Uint64, origin, now, n int64) word.Status {
	rel, _, pos := p.locate(now, origin)
	for {
		v := w.Load()
		if word.IsMark(v) {
			return word.Gone
		}
		if pos != inRange {
			return word.Live // the window of the grant is long gone
		}
		next, _ := p.refund(v, rel, n)
		if next == v {
			return word.Live
		}
		chaos.Yield()
		if w.CompareAndSwap(v, next) {
			return word.Live
		}
		chaos.Retried()
	}
}

// SettleWord gives n back to the word w for a grant or a charge at at, as
// RefundWord does, and returns the window's state at now after it, as a
// settlement answers it (what PeekValue answers of the value the refund
// left, its peeked unit not taken: Allowed, and Remaining what is held),
// in one step. ok is false, and nothing is given back, when w holds a
// mark or a retired state, or at or now lies outside the word's range:
// the caller then takes RefundWord's path.
func (p *Params) SettleWord(w *atomic.Uint64, origin, at, now, n int64) (d Decision, ok bool) {
	rel, _, pos := p.locate(at, origin)
	nrel, e, npos := p.locate(now, origin)
	if pos != inRange || npos != inRange {
		return Decision{}, false
	}
	for {
		v := w.Load()
		if word.IsMark(v) || isRetired(v) {
			return Decision{}, false
		}
		next, _ := p.refund(v, rel, n)
		if next != v {
			chaos.Yield()
			if !w.CompareAndSwap(v, next) {
				chaos.Retried()
				continue
			}
		}
		d, _ = p.peek(next, nrel, e, inRange)
		if d.Allowed {
			d.Remaining++ // the peeked unit is not taken
		}
		d.Allowed = true
		return d, true
	}
}

// RetireIdleWord marks w Dead if at now it answers as a new window would.
func (p *Params) RetireIdleWord(w *atomic.Uint64, origin, now int64) bool {
	rel, _, pos := p.locate(now, origin)
	return word.RetireIf(w, func(v uint64) bool {
		_, ok := p.retireIdle(v, rel, pos)
		return ok
	})
}

// EvictWord marks w Dead whatever it holds and returns, in the same step,
// SpentOwed of what it held at the reading now.
func (p *Params) EvictWord(w *atomic.Uint64, origin, now int64) (spent, owed int64) {
	return word.Evict(w, func(v uint64) (int64, int64) { return p.SpentOwed(v, origin, now) })
}

// SpentValue returns the instant from which a window whose word is v
// answers as a new one made then would: the end of the last window its
// counts weigh in, or, with no count, the start of its own window (before
// which it refuses readings). It may lie in the past: a request whose
// reading is older still finds the window closed or counted until then.
//
// A sliding counter whose latest count is a debt (above N) reports one
// window more: the state made again from the instant (NewWord, NewSpent)
// holds N in the window before its end, which as the next window slides
// weighs less than the debt does; a window later, it refuses all the
// debt would, and more, never less.
func (p *Params) SpentValue(v uint64, origin int64) int64 {
	ks, curr, prev := p.unpack(v)
	lag := int64(0)
	switch {
	case curr > 0:
		lag = p.lag()
	case prev > 0:
		lag = 1
	}
	if p.kind == Sliding && (curr > p.limit || curr == 0 && prev > p.limit) {
		lag++
	}
	k := origin + ks
	switch {
	case (k^origin)&(k^ks) < 0: // the sum overflowed
		if ks > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	case k > math.MaxInt64/p.period-lag:
		return math.MaxInt64
	case k+lag < math.MinInt64/p.period:
		return math.MinInt64 // the window begins before the clock's first instant
	}
	return (k + lag) * p.period
}

// SpentOwed returns what a window whose word is v, evicted at the reading
// now, leaves to remember (see floodgate's MaxKeys): spent, its
// SpentValue, and owed, what the state made again from spent (NewWord,
// NewSpent) holds beyond a spent one, so that what it owes is never less
// than what v would have owed at now or after, and is exactly that at
// now where the state's form allows it.
//
// The state made again holds N in window ks, the window before the last
// in which v's counts weigh (the last, for the fixed window). The fixed
// window's owed is its count's excess over N: the state made again owes
// exactly what v owes, to the window's end. The sliding counter's owed is
// the previous window's count of the state made again: read from a window
// before ks it owes owed, as v owed at now; read in ks it owes the share
// of owed that the slide leaves, which falls no faster than v's debt
// does. v's debt is over by the end of ks at the latest (a count above N
// adds a window to spent: see SpentValue). A reading before v's window
// counts as its start. owed is 0 when v owes nothing at now, and when
// spent saturates.
func (p *Params) SpentOwed(v uint64, origin, now int64) (spent, owed int64) {
	spent = p.SpentValue(v, origin)
	if spent == math.MaxInt64 || spent == math.MinInt64 {
		return spent, 0
	}
	ks, curr, prev := p.unpack(v)
	rel, e, pos := p.locate(now, origin)
	switch {
	case pos == pastRange:
		return spent, 0 // nothing v holds weighs that far on
	case pos == tooEarly || rel < ks:
		rel, e = ks, 0
	}
	if p.kind == Fixed {
		if rel > ks {
			return spent, 0
		}
		return spent, max(0, curr-p.limit)
	}
	c, pv := p.advance(ks, curr, prev, rel)
	debt := p.weighted(pv, e) + c - p.limit
	if debt <= 0 {
		return spent, 0
	}
	k, _ := floorDivMod(spent, p.period)
	if r := k - p.lag() - origin; rel < r {
		return spent, debt
	}
	// In window ks itself (where c ≤ N): the least previous count x whose
	// share x × (T − e') / T stays at or above v's debt,
	// pv × (T − e') / T + c − N, for every e' ≥ e: pv − floor((N − c) × T
	// / (T − e)). Below pv, since v owes: the share falls the slower.
	hi, lo := bits.Mul64(uint64(p.limit-c), uint64(p.period))
	if hi >= uint64(p.period-e) {
		return spent, pv // cannot be: v would owe nothing
	}
	q, _ := bits.Div64(hi, lo, uint64(p.period-e))
	return spent, max(1, pv-int64(q))
}

// RebaseWord translates a live word from origin window from to a later
// one, to. A window that falls out of the range held nothing that still
// weighs: it becomes a new state at the edge of the range.
func (p *Params) RebaseWord(v uint64, from, to int64) uint64 {
	ks, curr, prev := p.unpack(v)
	shift := uint64(to) - uint64(from)
	if shift > uint64(p.maxRel) || ks-int64(shift) < -p.maxRel {
		return p.pack(-p.maxRel, 0, 0)
	}
	return p.pack(ks-int64(shift), curr, prev)
}
