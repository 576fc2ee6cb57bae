package shardlog

import "github.com/floodgate-go/floodgate/internal/chaos"

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
