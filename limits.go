package floodgate

import (
	"errors"
	"fmt"

	"github.com/floodgate-go/floodgate/internal/bucket"
	"github.com/floodgate-go/floodgate/internal/flat"
	"github.com/floodgate-go/floodgate/internal/keystate"
	"github.com/floodgate-go/floodgate/internal/plan"
)

// Limits decides each request against several Limiters together, for
// rules such as "10 a second and 1,000 an hour": a request passes only if
// every one of them admits it. The Limiters are asked in order; when one
// refuses, the ones before it are given back what they took (the key's
// grant and any global cap's), as a Limiter's own global cap is, so a
// refused request consumes nothing anywhere. Between the grant and its
// refund, a concurrent request for the key may find less than was there,
// never more, so no Limiter ever admits more than its rule.
//
// A refund is exact for every algorithm but the sliding log, which drops
// one when another grant for the key landed in between (it is then charged
// for the refused request, never the reverse): put a sliding-log Limiter
// last, where it is never refunded.
//
// Each Limiter keeps its own keys, clock and options; a key means the same
// client in all of them. Limits is safe for concurrent use. It does not
// own its Limiters: Close them when done.
type Limits struct {
	ls []*Limiter
}

// NewLimits returns Limits over ls, asked in the order given. It is an
// error to pass none, a nil Limiter, or more than MaxPolicies.
func NewLimits(ls ...*Limiter) (*Limits, error) {
	if len(ls) == 0 {
		return nil, errors.New("floodgate: NewLimits needs at least one Limiter")
	}
	if len(ls) > MaxPolicies {
		return nil, fmt.Errorf("floodgate: NewLimits takes at most %d Limiters, got %d", MaxPolicies, len(ls))
	}
	for i, l := range ls {
		if l == nil {
			return nil, fmt.Errorf("floodgate: NewLimits: Limiter %d is nil", i)
		}
	}
	return &Limits{ls: append([]*Limiter(nil), ls...)}, nil
}

// Allow reports whether one request for key passes every Limiter now, and
// if so consumes one from each.
func (m *Limits) Allow(key string) bool {
	d, _ := m.Decide(key, 1, nil)
	return d.Allowed
}

// AllowN asks every Limiter for n units for key, each at its own clock's
// now. It returns the most restrictive answer: on admission, the Decision
// of the Limiter with the fewest requests remaining (the longest
// ResetAfter among equals); on refusal, the refusing Limiter's, and
// nothing is consumed.
func (m *Limits) AllowN(key string, n int64) Decision {
	d, _ := m.Decide(key, n, nil)
	return d
}

// Decide is AllowN that also reports each Limiter's own answer, and which
// one refused: the request of one key as a Store decides asks (see
// Store.Decide). each[k], for every k below len(each) (nil reports none),
// receives the k-th Limiter's answer: what it decided, or, for a refused
// request, what it would answer to one request now (its Peek, after any
// refund), so that every policy can be reported. The index is that of
// the Limiter that refused the request, or -1 if every one admitted it.
func (m *Limits) Decide(key string, n int64, each []Decision) (Decision, int) {
	var buf [MaxPolicies]Decision
	all := buf[:len(m.ls)]
	if len(each) >= len(m.ls) {
		all = each[:len(m.ls)] // written in place: nothing past the last Limiter's
	}
	j := decideIn(m.ls, key, n, all, nil, nil, nil)
	if len(each) < len(m.ls) {
		copy(each, all)
	}
	if j >= 0 {
		return all[j], j
	}
	var best plan.Pick
	for k := range all {
		best.Offer(k, plan.Answer{Remaining: all[k].Remaining, ResetAfter: all[k].ResetAfter})
	}
	return all[best.Index()], -1
}

// grant is what one admitted request took from a Limiter, so that Limits
// can give it back whole: the key's state (an object, or the slot of an
// inline word, found again by the key's identity if it moved), and the
// global cap's state if the cap was asked. A grant held across a request
// (a Reservation, a Hold) keeps its key's serial in place of the slot
// (see hold).
type grant struct {
	s      keystate.State // for states held as objects
	id     flat.ID
	t      *flat.Table // for inline words: the slot the grant landed in, until hold
	i      int
	serial uint32 // for inline words, once held: the key's serial (flat.Table.Serial)
	g      *bucket.Bucket
	now, n int64
	lg     logGrant // a log's entry, when its state named it (see granter)
}

// holdable readies l for grants held across a request (a Reservation, a
// Hold, a WaitN's wait): its table keeps its keys' serials from now on
// (see flat.Flat.KeepSerials), once, before the first such grant, so
// that hold can keep a key's serial rather than its table. A Limiter that
// never holds a grant pays nothing for them. One of objects needs none:
// its grants keep their key's State, which no table holds.
func (l *Limiter) holdable() {
	if l.kind != objects {
		l.serials.Do(l.flat.KeepSerials)
	}
}

// hold makes gr, which l granted after holdable, a grant that may be held
// across a request: it keeps its key's serial in place of the table its
// word was in, and finds the key again by its identity when it gives
// back (see returnHeld). A table that a held grant kept would stay in
// memory for as long as the grant is held, and with it every table its
// shard has made since, each of which points to its successor: under
// MaxKeys churn (ids that come and go) a shard makes one every few
// thousand new ids, so that a reservation held for a long request kept
// memory that grew with the ids, without bound.
func (l *Limiter) hold(gr *grant) {
	if gr.t != nil && gr.i >= 0 {
		gr.serial = gr.t.Serial(gr.i)
	}
	gr.t, gr.i = nil, -1
}

// refundKey gives the key's own state back what gr took from it.
func (l *Limiter) refundKey(gr *grant) { l.refundKeyN(gr, gr.n) }

// refundKeyN gives the key's own state back n of what gr took from it.
func (l *Limiter) refundKeyN(gr *grant, n int64) {
	if g, ok := gr.s.(granter); ok && gr.lg.Cost() > 0 {
		g.RefundGrant(gr.lg, n) // a lapsed refund leaves the key charged: stricter, never looser
		return
	}
	switch {
	case gr.s != nil:
		l.returnObject(gr.s, gr.now, n)
	case gr.t != nil:
		l.returnWord(gr.id, gr.t, gr.i, gr.now, n, false, 0)
	case gr.serial != 0:
		l.returnHeld(gr.id, gr.serial, gr.now, n, false, 0, 0)
	}
}

// giveBack returns all that an admitted request took, the global cap's
// share included: a later check refused the request. The decision then
// counts as a denial in Stats.
func (l *Limiter) giveBack(gr *grant) {
	l.refundKey(gr)
	if gr.g != nil {
		l.returnGlobal(gr.g, gr.now, gr.n)
	}
	if c := l.count; c != nil {
		c.Add(countAllowed, -1)
		c.Inc(countDenied)
	}
}
