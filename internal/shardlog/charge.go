package shardlog

import "fmt"

// Costs known after the work. ChargeN takes a cost whatever the window
// holds, up to Params.Bound; AllowGrant admits an estimate and names the
// entry it made, and RefundGrant later gives back part of it. Both are
// claims of the head slot, like a grant (see decide), so that they are
// exact under contention: a charge is an entry of its cost, a refund an
// entry of cost −m at the newest entry's time.
//
// A refund must change what the newest entry counts, which every claim
// reads, and a claim's only check is its CAS on the head's slot. So a
// refund is itself a claim of the head: it writes an entry at the time of
// the newest one, A, with A's cumulative count less m, and lands only if
// no other claim landed after A (its CAS is the refund's instant). The
// window is exact from then on: A and the refund's entry R share a time,
// so every window holds both or neither, and counts cum(R) − cum(b).
// Then the refund settles A, bringing A's count down to R's, so that A
// keeps its cost less m and R costs nothing. Until then, cum(A) > cum(R)
// is the only place where the counts go down. Left inside the ring, the
// pair would mislead the searches, which take counts as non-decreasing,
// and Take's bound, which takes an old entry's count as a lower bound of
// the boundary's; so every claim settles such a pair first (see settled),
// and a claim that lost its slot to R reads the log again (see moveOn).
// As the newest pair it misleads no reader: a search that stops at A
// finds R's time, and the window counts from R. A ring copy keeps the
// pair as it is, to be settled on the new ring.

// A Grant names the entry that AllowGrant admitted, for RefundGrant: the
// time it was charged at, the cumulative cost up to it, and its cost. The
// zero Grant names none.
type Grant struct {
	ts   int64
	cum  uint64
	cost int64
}

// Cost is the cost of the grant.
func (g Grant) Cost() int64 { return g.cost }

// check is the error of a refund of m from g, or nil.
func (g Grant) check(m int64) error {
	switch {
	case g.cost < 1:
		return fmt.Errorf("shardedlog: a refund from a Grant that names no entry (a denial's, or the zero Grant)")
	case m < 1 || m > g.cost:
		return fmt.Errorf("shardedlog: a refund of %d from a grant of %d: it must be from 1 to the grant's cost", m, g.cost)
	}
	return nil
}

// ChargeN takes a cost n ≥ 1 at now whatever the window holds: a cost
// already spent, which cannot be refused. It is charged as a grant is, at
// max(now, the newest entry's time), but without the limit's check: the
// cost in the window (t − T, t] may pass N, and the key then owes the
// excess. While it owes, every admission is refused (the window holds
// more than N), and the debt ages out with the entries that carry it,
// within a period of the charge.
//
// Its Decision is the key after the charge: Allowed true, Limit N,
// Remaining max(0, N − w) for the cost w in the window ending at the
// charge, which includes it, Owed max(0, w − N), RetryAfter the wait until
// a request of cost 1 could pass (0 if one could now: when enough entries
// have left the window), and ResetAfter the wait until the key is back to
// full (the charge leaves the window).
//
// A charge that would leave more than Params.Bound in the window charges
// nothing and returns an error wrapping ErrDebtBound that names the
// bound, with d the key as it stands (Allowed false, RetryAfter and Owed
// as above); n < 1 is an error too, with d zero, whatever the log holds.
// live is false, and nothing is charged, once the log has retired: the
// charge belongs to its Successor.
func (l *Log) ChargeN(now, n int64) (d Decision, live bool, err error) {
	if n < 1 {
		return Decision{}, true, l.p.chargeError(n, 0)
	}
	for {
		d, charged, live, done := l.step(now, n, opCharge, nil)
		if !done {
			continue
		}
		if live && !charged {
			return d, true, l.p.chargeError(n, held(d))
		}
		return d, live, nil
	}
}

// held is the cost in the window that d, a Decision of a log, answers for.
func held(d Decision) int64 { return d.Limit - d.Remaining + d.Owed }

// AllowGrant is AllowN that also returns the Grant of what it admitted,
// for RefundGrant; on a denial the Grant is zero.
func (l *Log) AllowGrant(now, n int64) (d Decision, g Grant, live bool) {
	for {
		if d, _, live, done := l.step(now, n, opAllow, &g); done {
			return d, g, live
		}
	}
}

// RefundGrant gives back m of the cost of the entry g names (1 ≤ m ≤
// g.Cost()), exactly, if that entry is still the newest and has not been
// refunded since: it reports whether it did. A refund lapses, and the key
// keeps the whole cost, once another entry of the key was charged after
// g's (a grant, a charge, or a refund of another's entry), once the entry
// was refunded (by RefundGrant or Refund: a Grant is refunded once), and
// once the log has retired. (After a refund of its whole cost, a Grant
// can name a later entry of the same time, cost and cumulative cost; a
// refund of that one leaves every window as a refund of g's would.) A
// ring copy does not make it lapse. Under contention, whether it landed is
// decided by one CAS, and the answer is always true to it. For m outside
// 1 to g.Cost(), or a zero g, it returns an error and refunds nothing.
func (l *Log) RefundGrant(g Grant, m int64) (bool, error) {
	if err := g.check(m); err != nil {
		return false, err
	}
	return l.refund(g.ts, uint64(g.cost), uint64(m), g.cum, true, 0, nil), nil
}

// SettleGrant is RefundGrant followed by Peek(now), in one step where it
// can: once the refund lands, its answer is read from the view that the
// refund's claim extended, with no second reading of the head. answered
// is false, and d is not an answer, when there is no such view (the
// refund lapsed, or an entry the answer reads was overwritten meanwhile):
// the caller then peeks. The refund is as RefundGrant's, error included.
func (l *Log) SettleGrant(g Grant, m, now int64) (d Decision, answered bool, err error) {
	if err := g.check(m); err != nil {
		return d, false, err
	}
	answered = l.refund(g.ts, uint64(g.cost), uint64(m), g.cum, true, now, &d)
	return d, answered, nil
}

// refund gives back m of the newest entry's cost if that entry was charged
// at ts and costs cost (and, with byCum, its cumulative cost is cum), and
// reports whether it did (see the protocol above). With d not nil, it
// reports instead whether it did and wrote Peek(now)'s answer to *d.
func (l *Log) refund(ts int64, cost, m, cum uint64, byCum bool, now int64, d *Decision) bool {
	for {
		v, retired := l.current()
		if retired || v.h-1 <= v.lo || v.prevTs != ts || (byCum && v.prevCum != cum) {
			return false
		}
		_, before, got := v.r.entryAt(v.h - 2)
		if !got {
			continue
		}
		// An unsettled newest, a refund's entry, costs less than 0: no
		// cost matches it.
		if (v.prevCum-before)&cumMask != cost {
			return false
		}
		if _, _, _, done := l.decide(&v, ts, int64(m), opRefund, nil); done {
			return d == nil || l.peekAfterRefund(&v, ts, m, now, d)
		}
	}
}

// peekAfterRefund writes Peek(now)'s answer to *d, read from v, the view
// whose head a refund of m at ts has just claimed: the ring as v read it,
// and the refund's entry after it. It reports false when an entry it
// reads has been overwritten since (a later lap's claim), or the window
// reads otherwise than a fresh view would. The refunded entry may not be
// settled yet (its count above the refund's): as the newest pair of one
// time, it misleads no search (see the protocol above).
func (l *Log) peekAfterRefund(v *view, ts int64, m uint64, now int64, d *Decision) bool {
	after := view{r: v.r, h: v.h + 1, prevTs: ts, prevCum: (v.prevCum - m) & cumMask, from: v.from}
	after.lo = lowest(after.h, v.r.mask)
	o, ok := l.evaluate(&after, now)
	if !ok {
		return false
	}
	*d, ok = l.decision(&after, o, now, 1, l.p.fits(int64(o.window), 1, opPeek))
	return ok
}

// chargeDecision is the answer to a charge of n at t that fits the bound,
// on the window o found: the key after the charge.
func (l *Log) chargeDecision(v *view, o outcome, t, n int64) (Decision, bool) {
	N, w := l.p.limit, int64(o.window)
	d := Decision{Allowed: true, Limit: N, Remaining: max(0, N-w-n), Owed: max(0, w+n-N), ResetAfter: l.p.after(o.charged, t)}
	need := w + n + 1 - N // what must leave before a request of 1 fits
	if need <= 0 {
		return d, true
	}
	ts := o.charged // the charge itself must leave
	if need <= w {
		var ok bool
		if ts, ok = v.firstEnough(o.b, o.bCum, uint64(need)); !ok {
			return d, false
		}
	}
	d.RetryAfter = l.p.after(ts, t)
	return d, true
}

// standing is the key as it stands at t, on the window o found, for a
// charge that was refused: Allowed false, and the rest as a charge
// answers.
func (l *Log) standing(v *view, o outcome, t int64) (Decision, bool) {
	N, w := l.p.limit, int64(o.window)
	d := Decision{Limit: N, Remaining: max(0, N-w), Owed: max(0, w-N)}
	if w > 0 {
		d.ResetAfter = l.p.after(v.prevTs, t)
	}
	if need := w + 1 - N; need > 0 {
		ts, ok := v.firstEnough(o.b, o.bCum, uint64(need))
		if !ok {
			return d, false
		}
		d.RetryAfter = l.p.after(ts, t)
	}
	return d, true
}
