package floodgate

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/decision"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/word"
)

// Costs known only when the work ends (the tokens a model streamed, the
// bytes sent) are charged in one of two ways: Charge, which takes the
// units whatever the key holds, so that the key may owe; or Reserve,
// which admits an estimate now, and Settle, which later gives back what
// the estimate had over the cost or charges what the cost had over the
// estimate. A key that owes is refused every request until its debt is
// paid back (see each algorithm's paragraph in the package
// documentation), and every Decision says what it owes (Decision.Owed).

// ErrDebtBound is the error of a charge that would leave a key owing more
// than its state can hold (the bound is each algorithm's; see the package
// documentation). Nothing is charged then: the key's debt never wraps.
var ErrDebtBound = decision.ErrDebtBound

// ErrSettled is the error of a second Settle of one Reservation.
var ErrSettled = errors.New("floodgate: the reservation is settled already")

// ErrNotReserved is Settle's error on a Reservation that was refused (or
// is the zero value): it took nothing, and has nothing to settle.
var ErrNotReserved = errors.New("floodgate: the reservation was refused; it has nothing to settle")

// Charge takes n units from key now, whatever the key holds: a cost
// already spent, which no refusal could undo. A key that held fewer than
// n is left owing the rest, and refuses every request until the debt is
// paid back: at the rule's rate (the buckets), at the window's end (the
// fixed window), or as the charge ages out of the window (the sliding
// counter and log). The global cap, if any, is charged the same way.
//
// The Decision is the key's state after the charge: Allowed is true (the
// units were taken), Remaining what is left (0 while the key owes), Owed
// what the key owes, RetryAfter the wait until a request of 1 could pass
// (0 if one could now), and ResetAfter the wait until the key is full.
// With a global cap, Remaining is the smaller of the two.
//
// Charge returns an error, and charges nothing, for n below 1, and for a
// charge that would leave the key (or the cap) owing more than its state
// can hold (ErrDebtBound). For an existing key it allocates nothing.
func (l *Limiter) Charge(key string, n int64) (Decision, error) {
	var d Decision
	err := l.chargeID(l.hasher.ID(key), l.now(), n, &d)
	return d, err
}

// Reserve asks for estimate units for key now, as AllowN does, for a
// request whose cost is known only when it ends: Settle then charges the
// cost. A Reservation is settled once; one that is never settled keeps
// its estimate. Reserve allocates nothing for an existing key.
//
// An estimate of 0 takes nothing: it is admitted when a request of 1
// would be (by the key and the global cap), and Settle charges the whole
// cost, as Charge does. That is Envoy AI Gateway's pattern (a check at
// the request, the cost at its end); every request in flight may then
// run the key past its budget, which an estimate bounds.
//
//	r := lim.Reserve(client, 500) // the tokens a reply may take
//	if !r.Decision().Allowed {
//		return errTooMany
//	}
//	used := serve()
//	d, err := r.Settle(used) // gives back 500 − used, or charges the overrun
//
// A Reservation holds no reference to key, nor to the table its state
// was in: what it keeps does not grow with the ids that come and go while
// it is held. It must not be copied: a copy could settle twice (go vet
// reports copies).
func (l *Limiter) Reserve(key string, estimate int64) (r Reservation) {
	// Written in place: the Reservation is the caller's, not a copy.
	r.l = l
	if estimate == 0 {
		id, now := l.hasher.ID(key), l.now()
		l.check(id, now, &r.d)
		r.gr.id = id
	} else {
		l.holdable()
		l.allowAt(key, l.now(), estimate, &r.gr, &r.d)
		l.hold(&r.gr)
	}
	r.ok = r.d.Allowed
	return
}

// check is Reserve's answer to an estimate of 0 for key id at now: what
// a request of 1 would be answered, by the key and the global cap, with
// Remaining what is left, since nothing was taken.
func (l *Limiter) check(id flat.ID, now int64, d *Decision) {
	*d = l.peekID(id, now)
	g := l.global.Load()
	if !d.Allowed {
		return
	}
	d.Remaining++ // Peek answers a request of 1 as if taken
	if g == nil {
		return
	}
	gd, live := g.Peek(now)
	for !live {
		g = l.nextGlobal(g, now)
		gd, live = g.Peek(now)
	}
	if !gd.Allowed {
		*d = fromCore(gd)
		return
	}
	d.Remaining = min(d.Remaining, gd.Remaining+1)
}

// A Reservation is an estimate that Limiter.Reserve admitted, or refused,
// for a request whose cost is known only when it ends. Settle it once
// with that cost. The zero value is a refused reservation.
type Reservation struct {
	l       *Limiter
	gr      grant // what the admission took (its key's id alone for a check of 0)
	d       Decision
	ok      bool // admitted
	settled atomic.Bool
}

// Decision is what Reserve answered: whether the estimate was admitted,
// with the key's state after it.
func (r *Reservation) Decision() Decision { return r.d }

// Settle charges the request's actual cost in place of its estimate: it
// gives back what the estimate had over actual, as if never taken, or
// charges what actual has over the estimate, as Charge does, so that the
// key may owe. It returns the key's state after the settlement as Charge
// does: Allowed true, Remaining what is left, Owed what the key owes,
// RetryAfter the wait until a request of 1 could pass.
//
// A second Settle returns ErrSettled, and Settle of a refused reservation
// ErrNotReserved; a negative actual, or an overrun past what the key can
// owe (ErrDebtBound), returns an error and changes nothing, and the
// reservation stays unsettled. What the estimate had over actual is given
// back exactly by the buckets and the windows (to the window it was taken
// in: once that window has ended, there is nothing left to give back),
// and by the sliding log unless a later request of the key was charged
// after it (see its paragraph in the package documentation); a key
// evicted or reset since keeps nothing to give back. Settle is safe to
// call from any goroutine; of two at once, one settles.
func (r *Reservation) Settle(actual int64) (d Decision, err error) {
	l := r.l
	if l == nil || !r.ok {
		return Decision{}, ErrNotReserved
	}
	if actual < 0 {
		return Decision{}, fmt.Errorf("floodgate: Settle(%d): a cost cannot be negative", actual)
	}
	if !r.settled.CompareAndSwap(false, true) {
		return Decision{}, ErrSettled
	}
	if err := l.settleGrant(&r.gr, r.gr.n, actual, &d); err != nil {
		r.settled.Store(false)
		return Decision{}, err
	}
	return d, nil
}

// settleGrant settles what gr took, est units of its key (gr.id; the
// rest of gr only if est > 0), to actual: it gives back est − actual, or
// charges actual − est, and writes the key's state after it to *d, as
// Settle returns it. An error comes before anything changes.
func (l *Limiter) settleGrant(gr *grant, est, actual int64, d *Decision) error {
	now := l.now()
	switch {
	case actual > est:
		return l.chargeID(gr.id, now, actual-est, d)
	case actual < est:
		if gr.g == nil && l.settleWord(gr, est-actual, now, d) {
			return nil
		}
		answered := false
		if g, ok := gr.s.(granter); ok && gr.lg.Cost() > 0 {
			// A lapsed refund leaves the key charged: stricter, never looser.
			var sd decision.Decision
			sd, answered = g.SettleGrant(gr.lg, est-actual, now)
			*d = fromCore(sd)
		} else {
			l.refundKeyN(gr, est-actual)
		}
		if gr.g != nil {
			l.returnGlobal(gr.g, gr.now, est-actual)
		}
		if answered {
			settledFrom(d)
			return nil
		}
	}
	l.settledAt(gr, now, d)
	return nil
}

// settleWord gives n back to the word of the key gr took from and writes
// the key's state after it to *d, in one step, as refundKeyN then
// settledAt would: false, with nothing given back, when gr is not a word's
// grant, when its slot no longer holds a word of the key (a resize moved
// it, the key was removed) or a reading lies outside its range, for the
// general path. A held grant's slot is its key's, found again, while the
// key has its serial (see returnHeld).
func (l *Limiter) settleWord(gr *grant, n, now int64, d *Decision) bool {
	t, i := gr.t, gr.i
	switch {
	case t != nil:
	case gr.serial != 0:
		t, i = l.heldWord(gr.id, gr.serial)
	default:
		return false
	}
	if i < 0 {
		return false
	}
	rs := rulesOf(t)
	if l.kind == bucketWords {
		bd, ok := rs.bucket.SettleWord(t.Word(i), t.Origin, now, n)
		*d = Decision(bd)
		return ok
	}
	wd, ok := rs.window.SettleWord(t.Word(i), t.Origin, gr.now, now, n)
	*d = Decision(wd)
	return ok
}

// settledAt writes to *d what settled would for the key that gr took
// from, read where gr found it (its state, or its slot while the slot
// still holds a word), with no second lookup; else, and for a held
// grant's word, as settled finds it.
func (l *Limiter) settledAt(gr *grant, now int64, d *Decision) {
	found := false
	switch {
	case gr.s != nil:
		var pd decision.Decision
		pd, found = gr.s.Peek(now)
		*d = fromCore(pd)
	case gr.t != nil && gr.i >= 0:
		// A table never gives a key's slot to another key: a word that is
		// no mark is still gr's key's (a resize leaves Moved behind).
		if v := gr.t.Word(gr.i).Load(); !word.IsMark(v) {
			rs := rulesOf(gr.t)
			if l.kind == bucketWords {
				*d = Decision(rs.bucket.PeekValue(v, gr.t.Origin, now))
			} else {
				*d = Decision(rs.window.PeekValue(v, gr.t.Origin, now))
			}
			found = true
		}
	}
	if !found {
		*d = l.settled(gr.id, now)
		return
	}
	settledFrom(d)
}

// settledFrom turns d, a Peek's answer, into a settlement's: Allowed,
// and the request of 1 that a Peek answers as if taken not taken.
func settledFrom(d *Decision) {
	if d.Allowed {
		d.Remaining++
	}
	d.Allowed = true
}

// settled is the Decision of a settlement that charged key id nothing
// more: what is left, with Allowed true.
func (l *Limiter) settled(id flat.ID, now int64) Decision {
	d := l.peekID(id, now)
	settledFrom(&d)
	return d
}

// chargeID is Charge for key id at now, its answer written to *d.
func (l *Limiter) chargeID(id flat.ID, now, n int64, d *Decision) error {
	return l.chargeGrant(id, now, n, d, nil)
}

// chargeGrant is chargeID that also writes to out, if not nil, what the
// charge took, for refundKey and returnGlobal to give it back.
func (l *Limiter) chargeGrant(id flat.ID, now, n int64, d *Decision, out *grant) error {
	if n < 1 {
		return fmt.Errorf("floodgate: a charge of %d: a cost must be at least 1", n)
	}
	var gr grant
	var err error
	if l.kind == objects {
		gr.s, err = l.chargeObject(id, now, n, d)
	} else {
		gr.t, gr.i, err = l.chargeWord(id, now, n, d)
	}
	if err != nil {
		return err
	}
	gr.id, gr.now, gr.n = id, now, n
	g := l.global.Load()
	if g != nil {
		gd, err := l.chargeGlobal(g, now, n)
		if err != nil {
			l.refundKey(&gr)
			*d = Decision{}
			return err
		}
		gr.g = g
		d.Remaining = min(d.Remaining, gd.Remaining)
		d.RetryAfter = max(d.RetryAfter, gd.RetryAfter)
	}
	if out != nil {
		*out = gr
	}
	return nil
}

// chargeObject charges key id's state at now, following the line of
// successors past retired states, and returns the state that took it.
func (l *Limiter) chargeObject(id flat.ID, now, n int64, d *Decision) (keystate.State, error) {
	s := l.state(id, now)
	for {
		c, ok := s.(keystate.Charger)
		if !ok {
			return nil, keystate.ErrCannotCharge
		}
		cd, live, err := c.ChargeN(now, n)
		if err != nil {
			return nil, fmt.Errorf("floodgate: %w", err)
		}
		if live {
			*d = fromCore(cd)
			return s, nil
		}
		s = l.successor(id, s, now)
	}
}

// chargeGlobal charges the global cap g n units at now, following its
// successors.
func (l *Limiter) chargeGlobal(g *bucket.Bucket, now, n int64) (bucket.Decision, error) {
	for {
		d, live, err := g.ChargeN(now, n)
		if err != nil {
			return d, fmt.Errorf("floodgate: the global cap: %w", err)
		}
		if live {
			return d, nil
		}
		g = l.nextGlobal(g, now)
	}
}
