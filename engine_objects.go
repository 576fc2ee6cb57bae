package floodgate

import (
	"math"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/keystate"
)

// The object engine: the sliding log, the mutex twins and the algorithms
// the tests register keep a keystate.State object per key, out of line,
// behind a pointer beside the key's slot in the flat table. Every loop
// over the objects' protocol is in this file.
//
// The protocol. A request loads its key's State (creating it on first
// use) and calls it. A State that has retired (evicted, reset, or moved
// on by itself) answers "not live" and changes nothing; the request then
// asks the key's successor state, which the table installs under the
// shard's lock (successor), and goes on there. Retirement is atomic with
// respect to every grant (see keystate.State), so a grant lands on
// exactly one state. Allow's path, for a key already held: hash the key,
// find the slot (state), load the pointer (see form), and call the
// State's Take through its interface (takeObject). Each function here
// takes the key's identity, which its caller has computed once.

// form says what a Limiter's slots point at. A State is an interface, two
// words, and a slot holds one pointer, so a State in general lives in a
// box: a request follows the slot to the box, and the box to the state.
// An algorithm whose Limiter makes states of one type only (successors and
// SetRule's conversions included) can be pointed at directly instead: the
// slot's pointer is the state's own, and a request reaches the state's
// line with one dependent load fewer (a cache miss, on a key that has
// left the cache). The sliding log and its twin are (see their traits).
// The direct forms are named here, in stateAt and pointerTo, rather than
// answered through an interface, because stateAt runs on every request,
// and a switch on a byte costs less than an indirect call.
type form uint8

const (
	boxed        form = iota // a *box
	logForm                  // a *keystate.Log
	mutexLogForm             // a *keystate.MutexLog
)

// box holds a State of the boxed form in the flat table.
type box struct{ s keystate.State }

// stateAt returns the state slot pointer p names, or nil for nil.
func (l *Limiter) stateAt(p unsafe.Pointer) keystate.State {
	switch {
	case p == nil:
		return nil
	case l.form == logForm:
		return (*keystate.Log)(p)
	case l.form == mutexLogForm:
		return (*keystate.MutexLog)(p)
	}
	return (*box)(p).s
}

// pointerTo returns the slot pointer that names s. The type assertions
// hold because a Limiter of a direct form makes states of one type only.
func (l *Limiter) pointerTo(s keystate.State) unsafe.Pointer {
	switch l.form {
	case logForm:
		return unsafe.Pointer(s.(*keystate.Log))
	case mutexLogForm:
		return unsafe.Pointer(s.(*keystate.MutexLog))
	}
	return unsafe.Pointer(&box{s})
}

// takeObject is Allow's request on key's state at now: one unit, the
// verdict only. It is onObject's loop for opTake, written out on its own
// because it is the engine's hottest path: in the general loop, the
// spills of its other requests' arguments cost the mutex twins 6% of
// their Allow.
func (l *Limiter) takeObject(id flat.ID, now int64) (allowed bool, s keystate.State) {
	s = l.state(id, now)
	allowed, live := s.Take(now, 1)
	for !live {
		s = l.successor(id, s, now)
		allowed, live = s.Take(now, 1)
	}
	return allowed, s
}

// onObject applies the request op (opAllow, opGrant or opReserve), for n units,
// to key id's state at now, following the line of successors past
// retired states. It returns the verdict, with the rest of the answer in
// a, as onWord does, and the state that answered, for a refund or a
// cancellation.
func (l *Limiter) onObject(id flat.ID, now int64, op op, n int64, a *answer) (ok bool, s keystate.State) {
	s = l.state(id, now)
	for {
		var live bool
		switch op {
		case opGrant:
			if g, grants := s.(granter); grants {
				var d decision.Decision
				d, a.lg, live = g.AllowGrant(now, n)
				a.d = fromCore(d)
				ok = a.d.Allowed
				break
			}
			fallthrough
		case opAllow:
			var d decision.Decision
			d, live = s.AllowN(now, n)
			a.d = fromCore(d)
			ok = a.d.Allowed
		default:
			a.wait, a.stat, ok, live = s.(reserver).ReserveN(now, n, a.maxWait)
		}
		if live {
			return ok, s
		}
		s = l.successor(id, s, now)
	}
}

// returnObject gives a key's state back a grant of n at now that a later
// check refused, along the line of successors if the state retired
// carrying it.
func (l *Limiter) returnObject(s keystate.State, now, n int64) {
	for !s.Refund(now, n) {
		s = s.Successor(now)
	}
}

// state returns key id's state, creating it on first use.
func (l *Limiter) state(id flat.ID, now int64) keystate.State {
	for {
		t, i := l.flat.Find(id)
		if i < 0 {
			t, i = l.flat.Insert(id, now, func(t *flat.Table) (uint64, unsafe.Pointer, bool) {
				return 0, l.pointerTo(l.newObject(rulesOf(t), id, now)), true
			})
		}
		if s := l.stateAt(t.Ptr(i)); s != nil {
			return s
		}
		// Removed between finding and reading: look again.
	}
}

// newObject makes the state of key id, not held now, under the rule rs
// (its table's): as newState, or, if the sketch remembers the key as
// spent until later, as restrictive as that, owing what it owed.
func (l *Limiter) newObject(rs *ruleSet, id flat.ID, now int64) keystate.State {
	at := max(now, l.evictedAt.Load())
	if spent, owed := l.sketch.memory(id, rs); spent > at {
		return rs.alg.(objectAlgorithm).newSpent(at, spent, owed) // New let MaxKeys through
	}
	return rs.alg.newState(at)
}

// successor moves key id on from a retired state to the one that
// replaces it. A key that is no longer held is created anew (the sketch
// and the latest eviction's instant make it no looser than what was
// evicted); one still held by the retired state gets its successor.
func (l *Limiter) successor(id flat.ID, s keystate.State, now int64) keystate.State {
	p := l.flat.Replace(id, func(cur unsafe.Pointer) unsafe.Pointer {
		if l.stateAt(cur) == s {
			return l.pointerTo(s.Successor(now))
		}
		return cur
	})
	if p == nil {
		return l.state(id, now)
	}
	return l.stateAt(p)
}

// peekObject is Peek for key id: its state if it is held, or the state it
// would be made with now. It creates nothing.
func (l *Limiter) peekObject(id flat.ID, now int64) Decision {
	var s keystate.State
	t, i := l.flat.Find(id)
	if i >= 0 {
		s = l.stateAt(t.Ptr(i))
	}
	if s == nil {
		s = l.newObject(rulesOf(t), id, now)
	}
	d, live := s.Peek(now)
	for !live {
		s = s.Successor(now)
		d, live = s.Peek(now)
	}
	return fromCore(d)
}

// resetObject removes key id, retiring its state, so that a request
// holding the state moves on to a fresh one.
func (l *Limiter) resetObject(id flat.ID) {
	l.flat.Remove(id, func(t *flat.Table, i int) { l.stateAt(t.Ptr(i)).Retire() })
}

// evictIdleObjects removes every state that answers at now as a new one
// would, and returns how many it removed.
func (l *Limiter) evictIdleObjects(now int64) int {
	return l.flat.DeleteIf(func(t *flat.Table, i int) bool { return l.stateAt(t.Ptr(i)).RetireIdle(now) })
}

// objectSpent is the flat table's Spent hook for states out of line: the
// instant a Peek says the state is full again.
func (l *Limiter) objectSpent(t *flat.Table, i int, now int64) int64 {
	s := l.stateAt(t.Ptr(i))
	if s == nil {
		return math.MinInt64
	}
	d, live := s.Peek(now)
	if !live || d.ResetAfter <= 0 {
		return math.MinInt64
	}
	return now + int64(min(d.ResetAfter, time.Duration(math.MaxInt64-max(now, 0))))
}

// evictObject is the flat table's Evict hook for states out of line.
func (l *Limiter) evictObject(t *flat.Table, i int, now int64) {
	l.evictedAtBound.Inc()
	at, owed := l.stateAt(t.Ptr(i)).(spentState).Evict(now)
	if at <= now {
		l.evictedFresh.Inc() // a new key's state already: forgetting it changes nothing from now on
	}
	if at != math.MinInt64 {
		l.sketch.record(t.ID(i), rulesOf(t), at, owed)
	}
}

// spentState is a State that can be evicted at MaxKeys: Evict retires it
// for good (its successor is new) and returns, in the same atomic step,
// the instant from which it would have answered as a new state
// (math.MinInt64 if it was retired already), and what it owes at now
// beyond a state spent until then, for newSpent.
type spentState interface {
	Evict(now int64) (spent, owed int64)
}
