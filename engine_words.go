package floodgate

import (
	"fmt"
	"math"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/window"
	"github.com/floodgate-go/floodgate/internal/word"
)

// The word engine: the states of the token and leaky bucket, the fixed
// window and the sliding counter live inline in the flat table, one
// atomic word per key beside the key's identity. Every loop over the
// words' protocol is in this file.
//
// The protocol. A request finds its key's slot in its shard's current
// table without a lock (Lookup), and applies its transition to the slot's
// word with one CAS (the algorithm's *Word methods). The word's status
// then says what happened:
//
//   - Live: the transition applied, or the answer needs none (a denial).
//   - Gone: the word is a mark, Moved (a resize or a rebase copied it to
//     a newer table, and the copy carries every grant that landed before
//     the mark) or Dead (evicted or reset): find the key again, under the
//     shard's lock, creating it if it is no longer held (create).
//   - Rebase: the reading lies past the range of the table's time origin:
//     move the origin (a new table, every word translated), then find the
//     key again.
//
// A request that lands on a Live word has been decided once, exactly, and
// one that meets a mark changed nothing, so following the marks never
// grants twice. Allow's path, for a key already held: hash the key
// (Allow), read the clock (Allow), load the shard's table and find the
// slot, and CAS the word (onWord, then the algorithm's TakeWord): one
// cache line for the slot and its word, and no call that is not direct.

// op is what a request asks of its key's state.
type op uint8

const (
	opTake    op = iota // Allow: the verdict only
	opAllow             // AllowN: the whole Decision
	opReserve           // WaitN: a reservation
	opGrant             // AllowN that names its grant, for an exact refund (objects only; see granter)
)

// answer is what a state answered a request that asks for more than a
// verdict: AllowN's Decision, or WaitN's reservation (and what it asked:
// the longest wait it accepts). Allow passes none, so that its verdict
// comes back in a register. The answer's fields are stored one by one;
// a reader must read them one by one too, never copy the Decision whole:
// a wide load over narrower stores stalls store forwarding (see fromCore).
type answer struct {
	d       Decision      // opAllow
	maxWait time.Duration // opReserve: the longest wait the request accepts
	wait    time.Duration // opReserve: how long until the units are there
	tat     uint64        // opReserve on a word: the word it left
	stat    int64         // opReserve on a state object: the state it left
	lg      logGrant      // opGrant on a granter: the entry it made
}

// onWord applies the request op, for n units, to key id's word at now: it
// finds the slot, creating it on first use, applies the transition with
// the table's origin, and follows the word's status (see the protocol
// above). It returns the verdict (whether the units were granted, or
// reserved), with the rest of the answer in a (nil for opTake), and the
// slot the answer came from, for a refund or a cancellation; the slot is
// below 0 when the reading is too early for the table, and the answer is
// then a denial with Never. The transitions are written out in the loop,
// not called through a helper, so that Allow's path makes one call, to
// the algorithm.
func (l *Limiter) onWord(id flat.ID, now int64, op op, n int64, a *answer) (ok bool, t *flat.Table, i int) {
	t = l.flat.Current(id)
	i = t.Lookup(id)
	for {
		if i < 0 {
			if t, i = l.create(id, now); i < 0 {
				if a != nil {
					a.d = Decision{Limit: l.rules.Load().capacity, RetryAfter: Never}
				}
				return false, t, -1
			}
		}
		// The word is read with the rule of the table it is in: SetRule
		// moves words to a table of the new rule, never changes a rule
		// under a word.
		rs := rulesOf(t)
		var st word.Status
		switch w := t.Word(i); {
		case op == opTake && l.kind == bucketWords:
			ok, st = rs.bucket.TakeWord(w, t.Origin, now, n)
		case op == opTake:
			ok, st = rs.window.TakeWord(w, t.Origin, now, n)
		case op == opAllow && l.kind == bucketWords:
			var d bucket.Decision
			d, st = rs.bucket.AllowWord(w, t.Origin, now, n)
			a.d, ok = fromCore(d), d.Allowed
		case op == opAllow:
			var d window.Decision
			d, st = rs.window.AllowWord(w, t.Origin, now, n)
			a.d, ok = fromCore(d), d.Allowed
		case l.kind == bucketWords:
			a.wait, a.tat, ok, st = rs.bucket.ReserveWord(w, t.Origin, now, n, a.maxWait)
		default:
			panic("floodgate: a window cannot reserve") // WaitN refuses the windows first
		}
		switch st {
		case word.Live:
			return ok, t, i
		case word.Gone:
			i = -1 // moved or removed: find it again under the shard's lock
		case word.Rebase:
			t, i = l.rebase(id, t, now)
		}
	}
}

// returnWord gives back to key id's word, in slot i of t, the n units a
// request took at now: a grant that a later check refused (a refund), or,
// when cancel is set, a reservation whose wait ended early, which left
// the word tat. It follows the word to its new slot if a resize moved it
// meanwhile. A key removed meanwhile keeps what it was charged (never the
// reverse), and so does a reservation that a later one was promised on,
// and a grant made under a rule that SetRule has changed since: the word
// it was taken from was converted, and what it is given back to belongs
// to another rule (stricter, never looser).
func (l *Limiter) returnWord(id flat.ID, t *flat.Table, i int, now, n int64, cancel bool, tat uint64) {
	rs := rulesOf(t)
	for i >= 0 && rulesOf(t) == rs && !l.giveWord(t, i, now, n, cancel, tat) {
		t, i = l.flat.Find(id) // moved by a resize, which copies the word as it was
	}
}

// returnHeld is returnWord for a grant held across a request, which
// keeps its key's serial rather than its table (see holdable): it gives
// back to key id's word the n units the grant took at now, while the key
// is the one the grant took them from, and drops them once it is not.
// The key's serial changes when the key is removed (evicted, reset or
// swept) and made again, and when SetRule converts it; a resize or a
// rebase keeps it. So what returnWord gives back, this gives back, and
// what returnWord drops, this drops, and also what returnWord would give
// to the key made again after it was removed from a table that replaced
// the grant's: a key removed meanwhile keeps what it was charged.
// origin is what tat is relative to, for a cancellation: a rebase since
// (the key's table has another origin) leaves the reservation spent, as
// a later reservation does.
func (l *Limiter) returnHeld(id flat.ID, serial uint32, now, n int64, cancel bool, tat uint64, origin int64) {
	for {
		t, i := l.heldWord(id, serial)
		if i < 0 || cancel && t.Origin != origin || l.giveWord(t, i, now, n, cancel, tat) {
			return
		}
	}
}

// heldWord returns the slot of key id's word, found again by the key's
// identity, if it still holds the key whose serial a held grant kept;
// else the slot is -1. The word may be Moved (a resize or a rebase moved
// it since the lookup), or Dead (the key is being removed): its status
// tells the caller.
func (l *Limiter) heldWord(id flat.ID, serial uint32) (*flat.Table, int) {
	t, i := l.flat.Find(id)
	if i >= 0 && t.Serial(i) != serial {
		i = -1
	}
	return t, i
}

// giveWord gives n back to the word in slot i of t, as returnWord says,
// and reports whether that settled it: given back, spent for good, or
// the key removed. It reports false when a resize or a rebase moved the
// word: the caller finds it again.
func (l *Limiter) giveWord(t *flat.Table, i int, now, n int64, cancel bool, tat uint64) bool {
	rs := rulesOf(t)
	var st word.Status
	switch {
	case cancel:
		_, st = rs.bucket.CancelWord(t.Word(i), tat, n)
	case l.kind == bucketWords:
		st = rs.bucket.RefundWord(t.Word(i), n)
	default:
		st = rs.window.RefundWord(t.Word(i), t.Origin, now, n)
	}
	return st == word.Live || t.Word(i).Load() != word.Moved
}

// create finds or creates id's word under its shard's lock, moving the
// table's origin first if the reading lies past its range. The slot is -1
// when the reading is too early for the table: the request is denied with
// Never.
func (l *Limiter) create(id flat.ID, now int64) (*flat.Table, int) {
	for {
		t, i, st := l.insertWord(id, now)
		if st != word.Rebase {
			return t, i
		}
		if t, i = l.rebase(id, t, now); i >= 0 {
			return t, i
		}
	}
}

// rebase moves the origin of id's table to now's and finds id again.
func (l *Limiter) rebase(id flat.ID, t *flat.Table, now int64) (*flat.Table, int) {
	l.flat.Rebase(id, t, l.origin(rulesOf(t), now))
	return l.flat.Find(id)
}

// insertWord finds id under its shard's lock, creating its word if absent.
// The status says why nothing could be created: a reading too early for
// the table, or one past its range (move the origin first).
func (l *Limiter) insertWord(id flat.ID, now int64) (*flat.Table, int, word.Status) {
	var st word.Status
	t, i := l.flat.Insert(id, now, func(t *flat.Table) (uint64, unsafe.Pointer, bool) {
		var w uint64
		w, st = l.newWord(id, t, t.Origin, now)
		return w, nil, st == word.Live
	})
	return t, i, st
}

// newWord is the word of key id created at now in table t, relative to
// origin, under t's rule: full from now, from the latest eviction's
// instant, or from what the sketch remembers of the key, whichever is
// latest, owing what the sketch remembers it owed.
func (l *Limiter) newWord(id flat.ID, t *flat.Table, origin, now int64) (uint64, word.Status) {
	rs := rulesOf(t)
	at := max(now, l.evictedAt.Load())
	spent, owed := l.sketch.memory(id, rs)
	if l.kind == bucketWords {
		return rs.bucket.NewWord(origin, now, max(at, spent))
	}
	return rs.window.NewWord(origin, now, at, spent, owed)
}

// peekWord is Peek for key id: its word if it is held, or the word it
// would be made with now. It writes nothing.
func (l *Limiter) peekWord(id flat.ID, now int64) Decision {
	t, i := l.flat.Find(id)
	rs, origin := rulesOf(t), t.Origin
	var v uint64
	held := false
	if i >= 0 {
		v = t.Word(i).Load()
		held = !word.IsMark(v)
	}
	if !held {
		// What the key would be made as now, relative to the table's
		// origin, or to one of its own if the reading lies past the range.
		var st word.Status
		v, st = l.newWord(id, t, origin, now)
		if st == word.Rebase {
			origin = l.origin(rs, now)
			v, st = l.newWord(id, t, origin, now)
		}
		if st != word.Live {
			return Decision{Limit: rs.capacity, RetryAfter: Never}
		}
	}
	if l.kind == bucketWords {
		return fromCore(rs.bucket.PeekValue(v, origin, now))
	}
	return fromCore(rs.window.PeekValue(v, origin, now))
}

// resetWord removes key id: its word is marked Dead under the shard's
// lock, so that a request holding the slot moves on to a fresh word.
func (l *Limiter) resetWord(id flat.ID) {
	l.flat.Remove(id, func(t *flat.Table, i int) { t.Word(i).Store(word.Dead) })
}

// evictIdleWords removes every word that answers at now as a new one
// would, and returns how many it removed.
func (l *Limiter) evictIdleWords(now int64) int {
	if l.kind == bucketWords {
		return l.flat.DeleteIf(func(t *flat.Table, i int) bool {
			return rulesOf(t).bucket.RetireIdleWord(t.Word(i), t.Origin, now)
		})
	}
	return l.flat.DeleteIf(func(t *flat.Table, i int) bool {
		return rulesOf(t).window.RetireIdleWord(t.Word(i), t.Origin, now)
	})
}

// wordSpent is the flat table's Spent hook for inline words.
func (l *Limiter) wordSpent(t *flat.Table, i int, _ int64) int64 {
	v := t.Word(i).Load()
	switch {
	case word.IsMark(v):
		return math.MinInt64
	case l.kind == bucketWords:
		return rulesOf(t).bucket.SpentValue(v, t.Origin)
	}
	return rulesOf(t).window.SpentValue(v, t.Origin)
}

// evictWord is the flat table's Evict hook for inline words. What the key
// held is remembered even when it lies before now: a request whose reading
// is older than the eviction's must still find it.
func (l *Limiter) evictWord(t *flat.Table, i int, now int64) {
	var at, owed int64
	rs := rulesOf(t)
	if l.kind == bucketWords {
		at = rs.bucket.EvictWord(t.Word(i), t.Origin)
	} else {
		at, owed = rs.window.EvictWord(t.Word(i), t.Origin, now)
	}
	l.evictedAtBound.Inc()
	if at <= now {
		l.evictedFresh.Inc() // a new key's state already: forgetting it changes nothing from now on
	}
	if at != math.MinInt64 {
		l.sketch.record(t.ID(i), rs, at, owed)
	}
}

// chargeWord is Charge on key id's word at now: it finds the slot,
// creating it on first use, and takes n whatever the word holds,
// following the word's status as onWord does. It returns the slot that
// took the charge, for a refund.
func (l *Limiter) chargeWord(id flat.ID, now, n int64, d *Decision) (t *flat.Table, i int, err error) {
	t = l.flat.Current(id)
	i = t.Lookup(id)
	for {
		if i < 0 {
			if t, i = l.create(id, now); i < 0 {
				return t, i, fmt.Errorf("floodgate: a charge at %d: the reading lies before the key's state could be made", now)
			}
		}
		rs := rulesOf(t)
		var st word.Status
		var cd decision.Decision
		if l.kind == bucketWords {
			cd, st, err = rs.bucket.ChargeWord(t.Word(i), t.Origin, now, n)
		} else {
			cd, st, err = rs.window.ChargeWord(t.Word(i), t.Origin, now, n)
		}
		switch {
		case err != nil:
			return t, i, fmt.Errorf("floodgate: %w", err)
		case st == word.Live:
			*d = fromCore(cd)
			return t, i, nil
		case st == word.Gone:
			i = -1
		case st == word.Rebase:
			t, i = l.rebase(id, t, now)
		}
	}
}
