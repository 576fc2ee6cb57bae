package window

import (
	"math"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// Window is a lock-free fixed-window or sliding-window counter for one key.
// Its whole state is one uint64 (see Params) changed by a CAS loop; a
// denial writes nothing.
//
// A Window retires once, for eviction, a reset, or when the clock moves
// more windows past its origin than the packed index holds. Retiring is a
// CAS on the same word as every grant, so no grant can land on a retired
// Window; a retired one answers live == false and the caller moves on to
// Successor.
//
// Layout: 64 bytes with the word first, like bucket.Bucket, so that
// no two keys' words share a cache line.
type Window struct {
	word   atomic.Uint64
	origin int64 // the window index at which the state's relative index is 0
	p      Params
	next   atomic.Pointer[Window]
	_      [8]byte
}

// New returns the state of a key that has taken nothing, whose origin is
// the window of now. A reading from an earlier window is denied.
func New(p Params, now int64) *Window {
	k, _ := floorDivMod(now, p.period)
	return &Window{origin: k, p: p}
}

// NewSpent returns the state of a key made at now that is new from spent
// on, and as full as such a state can be before, owing owed beyond it:
// the word Params.NewWord(origin, now, now, spent, owed) gives at the
// window of now (a window that held N, closed before it, and what was
// owed; see Params.SpentOwed), so that a key evicted with Evict comes
// back without the room it had used, and owing what it owed. With spent
// ≤ now it is New(p, now). Should that window lie beyond the range of
// now's (the clock went back further than a state holds), the origin
// moves forward to keep it exact, and a reading from before the new range
// is denied with Never.
func NewSpent(p Params, now, spent, owed int64) *Window {
	origin, w := p.spentState(now, spent, owed)
	s := &Window{origin: origin, p: p}
	s.word.Store(w)
	return s
}

// AllowN admits a request of cost n at now if the window allows it, and
// consumes nothing on denial. live is false when the state is retired.
func (s *Window) AllowN(now, n int64) (Decision, bool) {
	rel, e, pos := s.p.locate(now, s.origin)
	for {
		w := s.word.Load()
		next, d, live := s.p.allow(w, rel, e, pos, n)
		if next == w {
			return d, live
		}
		chaos.Yield()
		if s.word.CompareAndSwap(w, next) {
			return d, live
		}
		chaos.Retried()
	}
}

// Take is AllowN reduced to its verdict.
func (s *Window) Take(now, n int64) (allowed, live bool) {
	rel, e, pos := s.p.locate(now, s.origin)
	for {
		w := s.word.Load()
		next, allowed, live := s.p.admit(w, rel, e, pos, n)
		if next == w {
			return allowed, live
		}
		chaos.Yield()
		if s.word.CompareAndSwap(w, next) {
			return allowed, live
		}
		chaos.Retried()
	}
}

// Peek returns what AllowN(now, 1) would answer, and consumes nothing.
func (s *Window) Peek(now int64) (Decision, bool) {
	rel, e, pos := s.p.locate(now, s.origin)
	return s.p.peek(s.word.Load(), rel, e, pos)
}

// ChargeN charges n (n ≥ 1) at now whatever the window holds: a cost
// already incurred, which cannot be refused. The count of the window of
// now may pass N; the key is then in debt, and every admission is refused
// until the debt is paid: for Fixed at the end of the window (the next
// one starts at 0), for Sliding as the debt ages out (the previous
// window's count weighs less as the window slides, and nothing at the end
// of the next window). A reading from a window before the state's (a
// clock read overtaken by another's) charges the state's window: the
// reading's count is no longer held, and the cost is counted later
// rather than not at all; a Refund at the same reading then finds
// nothing to take back.
//
// Its Decision is the state after the charge: Allowed true, Limit N,
// Remaining what a request could still take now (0 in debt), Owed the
// whole units owed (Fixed: max(0, curr − N); Sliding: max(0,
// ceil(prev × (T − e) / T) + curr − N), the estimate's excess with the
// previous window's share rounded up as for Remaining), RetryAfter the
// wait until a request of cost 1 could pass (0 if it could now), and
// ResetAfter the wait until the key is back to full.
//
// A charge that would take the window's count past Params.MaxCount
// charges nothing and returns an error wrapping ErrDebtBound, with d the
// key as it stands (Allowed false); n < 1 is an error too, with d zero.
// live is false, and nothing is charged, when the state is retired: the
// charge then belongs to Successor.
func (s *Window) ChargeN(now, n int64) (d Decision, live bool, err error) {
	if err := checkCharge(n); err != nil {
		return Decision{}, true, err
	}
	rel, e, pos := s.p.locate(now, s.origin)
	for {
		w := s.word.Load()
		next, d, live, err := s.p.charge(w, rel, e, pos, n)
		if next == w {
			return d, live, err
		}
		chaos.Yield()
		if s.word.CompareAndSwap(w, next) {
			return d, live, err
		}
		chaos.Retried()
	}
}

// Refund takes back n that AllowN(now, n) granted, or that ChargeN(now,
// n) charged, from the window it was charged to: exactly, count − n, in
// debt too (a settle giving back an over-estimate), never below 0. It
// reports false when the state has since been retired carrying its
// counts: the refund then belongs to Successor.
func (s *Window) Refund(now, n int64) bool {
	rel, _, pos := s.p.locate(now, s.origin)
	for {
		w := s.word.Load()
		if pos != inRange && !isRetired(w) {
			return true // the window of the grant is long gone
		}
		next, live := s.p.refund(w, rel, n)
		if next == w {
			return live
		}
		chaos.Yield()
		if s.word.CompareAndSwap(w, next) {
			return live
		}
		chaos.Retried()
	}
}

// RetireIdle retires the state if at now it answers as a new one would.
func (s *Window) RetireIdle(now int64) bool {
	rel, _, pos := s.p.locate(now, s.origin)
	for {
		w := s.word.Load()
		next, ok := s.p.retireIdle(w, rel, pos)
		if !ok {
			return false
		}
		chaos.Yield()
		if s.word.CompareAndSwap(w, next) {
			return true
		}
		chaos.Retried()
	}
}

// Retire retires the state whatever it holds; its successor is new.
func (s *Window) Retire() { s.word.Store(resetWord) }

// Evict retires the state for good, as Retire does (its successor is new),
// and returns, for the reading now, what NewSpent needs to make the state
// again (Params.SpentOwed): the instant from which the state it held
// would answer as a new one made then would, and what it owes beyond a
// spent state. The instant may lie in the past, where it still binds
// requests whose readings are older. The reading and the retirement are
// one CAS, so no grant lands between them. On a state already retired it
// returns math.MinInt64 and 0, and changes nothing; what the state held
// then lives on, if anywhere, in Successor.
func (s *Window) Evict(now int64) (spent, owed int64) {
	for {
		w := s.word.Load()
		if isRetired(w) {
			return math.MinInt64, 0
		}
		spent, owed = s.p.SpentOwed(w, s.origin, now)
		chaos.Yield()
		if s.word.CompareAndSwap(w, resetWord) {
			return spent, owed
		}
		chaos.Retried()
	}
}

// Successor returns the state that stands for this one once it is retired.
// Every call on a retired Window returns the same *Window.
func (s *Window) Successor(now int64) *Window {
	if n := s.next.Load(); n != nil {
		return n
	}
	w := s.word.Load()
	origin, sw := s.p.successor(w, s.origin, now)
	n := &Window{origin: origin, p: s.p}
	n.word.Store(sw)
	if !isRetired(w) || s.next.CompareAndSwap(nil, n) {
		return n
	}
	return s.next.Load()
}
