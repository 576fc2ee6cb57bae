package storetest

import (
	"errors"
	"math"
	"testing"

	"github.com/floodgate-go/floodgate"
)

// settler runs Settler's obligations for each algorithm, if the Store is
// a Settler.
func (r *runner) settler(t *testing.T) {
	e := r.newEnv(t)
	if _, ok := e.s.(floodgate.Settler); !ok {
		t.Skipf("the Store (%T) is not a floodgate.Settler", e.s)
	}
	for _, alg := range r.algs {
		r.run(t, alg, func(t *testing.T) {
			r.run(t, "ChargeAllOrNothing", func(t *testing.T) { r.chargeAllOrNothing(t, alg) })
			r.run(t, "ChargeOwes", func(t *testing.T) { r.chargeOwes(t, alg) })
			r.run(t, "ChargeDecision", func(t *testing.T) { r.chargeDecision(t, alg) })
			r.run(t, "ReserveSettle", func(t *testing.T) { r.reserveSettle(t, alg) })
			r.run(t, "SettleErrors", func(t *testing.T) { r.settleErrors(t, alg) })
			r.run(t, "ReserveCheck", func(t *testing.T) { r.reserveCheck(t, alg) })
		})
	}
}

// settlerEnv is an env whose Store is a Settler.
func (r *runner) settlerEnv(t *testing.T) (*env, floodgate.Settler) {
	e := r.newEnv(t)
	return e, e.s.(floodgate.Settler)
}

// charge is Charge, failing the subtest on an error.
func (e *env) charge(s floodgate.Settler, asks []floodgate.Ask, each []floodgate.Decision) floodgate.Decision {
	e.t.Helper()
	d, err := s.Charge(e.ctx, asks, each)
	if err != nil {
		e.t.Fatalf("Charge(%s): %v", describe(asks), err)
	}
	return d
}

// owing is the index of the Decision a Charge or a Settle answers with:
// the ask that owes most, else the fewest remaining, else the longest
// ResetAfter, of the enforced asks (of every ask, if all are shadows).
func owing(asks []floodgate.Ask, all []floodgate.Decision) int {
	best := -1
	for _, shadows := range []bool{false, true} {
		for i, d := range all {
			if asks[i].Shadow && !shadows {
				continue
			}
			if best < 0 {
				best = i
				continue
			}
			b := all[best]
			if d.Owed > b.Owed || d.Owed == b.Owed && (d.Remaining < b.Remaining || d.Remaining == b.Remaining && d.ResetAfter > b.ResetAfter) {
				best = i
			}
		}
		if best >= 0 {
			return best
		}
	}
	return best
}

// chargeAllOrNothing: a Charge with an ask whose N is below 1, or that
// would leave its key owing more than it can (ErrDebtBound), is an error
// and charges no ask.
func (r *runner) chargeAllOrNothing(t *testing.T, alg string) {
	e, s := r.settlerEnv(t)
	p, q := e.policy(alg, rule(5)), e.policy(alg, rule(5))
	for _, c := range []struct {
		n    int64
		want error
	}{{0, nil}, {-1, nil}, {math.MinInt64, nil}, {math.MaxInt64, floodgate.ErrDebtBound}} {
		for _, asks := range [][]floodgate.Ask{
			{{Policy: p, Key: "k", N: 2}, {Policy: q, Key: "k", N: c.n}},
			{{Policy: q, Key: "k", N: c.n}, {Policy: p, Key: "k", N: 2}},
			{{Policy: p, Key: "k", N: 2}, {Policy: q, Key: "k", N: c.n, Shadow: true}},
		} {
			_, err := s.Charge(e.ctx, asks, nil)
			if err == nil || c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("Charge(%s): %v; want an error (%v)", describe(asks), err, c.want)
			}
		}
	}
	// Repeats whose sum passes the bound (and int64's).
	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 2}, {Policy: q, Key: "k", N: math.MaxInt64 / 2}, {Policy: q, Key: "k", N: math.MaxInt64 / 2}, {Policy: q, Key: "k", N: 4}}
	if _, err := s.Charge(e.ctx, asks, nil); !errors.Is(err, floodgate.ErrDebtBound) {
		t.Errorf("Charge(%s): %v; want an error that wraps ErrDebtBound", describe(asks), err)
	}
	e.holds(e.s, p, "k", 5, "p after Charges in error")
	e.holds(e.s, q, "k", 5, "q after Charges in error")
}

// chargeOwes: Charge takes each ask's N whatever its key holds, shadows
// too, repeats one after the other; a key left owing refuses requests.
func (r *runner) chargeOwes(t *testing.T, alg string) {
	e, s := r.settlerEnv(t)
	p, q, sh := e.policy(alg, rule(5)), e.policy(alg, rule(5)), e.policy(alg, rule(5))
	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 7}, {Policy: q, Key: "k", N: 2}, {Policy: q, Key: "k", N: 2}, {Policy: sh, Key: "k", N: 3, Shadow: true}}
	each := make([]floodgate.Decision, len(asks))
	d := e.charge(s, asks, each)
	for i, got := range each {
		if !got.Allowed {
			t.Errorf("Charge(%s): each[%d] %+v; want Allowed", describe(asks), i, got)
		}
	}
	if each[0].Owed != 2 || each[0].Remaining != 0 || d != each[0] {
		t.Errorf("Charge(%s): each[0] %+v, the Decision %+v; want the Decision each[0], owing 2 with none remaining", describe(asks), each[0], d)
	}
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, nil); refused != 0 {
		t.Errorf("a request of a key that owes 2: refused %d, want 0", refused)
	}
	e.holds(e.s, q, "k", 1, "q after a charge of 2 and 2 of its 5")
	e.holds(e.s, sh, "k", 2, "a shadow after a charge of 3 of its 5")
}

// chargeDecision: the Decision of a Charge is the enforced ask that owes
// most, else the one with the fewest remaining, else the longest
// ResetAfter (of every ask, if all are shadows).
func (r *runner) chargeDecision(t *testing.T, alg string) {
	e, s := r.settlerEnv(t)
	p, q, w := e.policy(alg, rule(5)), e.policy(alg, rule(3)), e.policy(alg, rule(5))
	slow := e.policy(alg, rule(50))
	for _, asks := range [][]floodgate.Ask{
		{{Policy: p, Key: "a", N: 1}, {Policy: q, Key: "a", N: 1}, {Policy: w, Key: "a", N: 6}},
		{{Policy: p, Key: "b", N: 1}, {Policy: q, Key: "b", N: 1}},
		{{Policy: p, Key: "c", N: 1}, {Policy: w, Key: "c", N: 6, Shadow: true}},
		{{Policy: p, Key: "d", N: 1, Shadow: true}, {Policy: w, Key: "d", N: 6, Shadow: true}},
		{{Policy: p, Key: "e", N: 1}, {Policy: slow, Key: "e", N: 46}},
		{{Policy: slow, Key: "f", N: 46}, {Policy: p, Key: "f", N: 1}},
	} {
		each := make([]floodgate.Decision, len(asks))
		d := e.charge(s, asks, each)
		if v := owing(asks, each); d != each[v] {
			t.Errorf("Charge(%s): the Decision %+v, each %+v; want each[%d]", describe(asks), d, each, v)
		}
	}
}

// reserveSettle: Reserve takes the estimates as Decide would; Settle
// gives back what an estimate had over the cost, or charges the overrun,
// which the key then owes; a shadow ask is settled as an enforced one.
func (r *runner) reserveSettle(t *testing.T, alg string) {
	e, s := r.settlerEnv(t)
	p, q, sh := e.policy(alg, rule(10)), e.policy(alg, rule(5)), e.policy(alg, rule(10))
	reserve := func(asks []floodgate.Ask) *floodgate.Hold {
		t.Helper()
		var h floodgate.Hold
		d, refused, err := s.Reserve(e.ctx, asks, nil, &h)
		if err != nil || refused != -1 || !d.Allowed || !h.Admitted {
			t.Fatalf("Reserve(%s): %+v, refused %d, %v, Admitted %v; want admitted", describe(asks), d, refused, err, h.Admitted)
		}
		return &h
	}

	asks := []floodgate.Ask{{Policy: p, Key: "back", N: 6}, {Policy: q, Key: "back", N: 1}}
	h := reserve(asks)
	asks[0].N = 2 // q's stays at its estimate
	each := make([]floodgate.Decision, 2)
	d, err := settle(e.ctx, s, asks, h, each)
	if err != nil {
		t.Fatalf("Settle(%s): %v", describe(asks), err)
	}
	if v := owing(asks, each); d != each[v] {
		t.Errorf("Settle(%s): the Decision %+v, each %+v; want each[%d]", describe(asks), d, each, v)
	}
	e.holds(e.s, p, "back", 8, "p, its estimate of 6 settled to 2")
	e.holds(e.s, q, "back", 4, "q, its estimate of 1 left as it was")

	asks = []floodgate.Ask{{Policy: p, Key: "over", N: 6}}
	h = reserve(asks)
	asks[0].N = 13
	d, err = settle(e.ctx, s, asks, h, each[:1])
	if err != nil {
		t.Fatalf("Settle(%s): %v", describe(asks), err)
	}
	if d.Owed != 3 || each[0] != d || !d.Allowed {
		t.Errorf("Settle of an estimate of 6 to 13 of 10: %+v, each[0] %+v; want Allowed, owing 3", d, each[0])
	}
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: "over", N: 1}}, nil); refused != 0 {
		t.Errorf("a request of a key that owes 3: refused %d, want 0", refused)
	}

	asks = []floodgate.Ask{{Policy: p, Key: "shadow", N: 2}, {Policy: sh, Key: "shadow", N: 1, Shadow: true}}
	h = reserve(asks)
	asks[1].N = 4
	if _, err := settle(e.ctx, s, asks, h, nil); err != nil {
		t.Fatalf("Settle(%s): %v", describe(asks), err)
	}
	e.holds(e.s, sh, "shadow", 6, "a shadow, its estimate of 1 settled to 4")
	e.holds(e.s, p, "shadow", 8, "p beside it, left at its estimate of 2")

	// Reserve refuses as Decide does, all or nothing.
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: q, Key: "refused", N: 5}}, nil); refused != -1 {
		t.Fatalf("a first request of 5 of 5: refused %d", refused)
	}
	var refusedHold floodgate.Hold
	asks = []floodgate.Ask{{Policy: p, Key: "refused", N: 3}, {Policy: q, Key: "refused", N: 1}}
	if d, refused, err := s.Reserve(e.ctx, asks, nil, &refusedHold); err != nil || refused != 1 || d.Allowed || refusedHold.Admitted {
		t.Errorf("Reserve(%s), q spent: %+v, refused %d, %v, Admitted %v; want refused by ask 1", describe(asks), d, refused, err, refusedHold.Admitted)
	}
	e.holds(e.s, p, "refused", 10, "p in a Reserve that q refused")
}

// settleErrors: Settle's errors change nothing and leave the Hold
// unsettled: ErrNotReserved for a zero Hold or one that Reserve refused,
// ErrSettled for one settled, an error for asks that are not Reserve's,
// for a negative cost, and for an overrun past what a key can owe
// (ErrDebtBound).
func (r *runner) settleErrors(t *testing.T, alg string) {
	e, s := r.settlerEnv(t)
	p := e.policy(alg, rule(10))
	if _, err := settle(e.ctx, s, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}, &floodgate.Hold{}, nil); !errors.Is(err, floodgate.ErrNotReserved) {
		t.Errorf("Settle of a zero Hold: %v; want ErrNotReserved", err)
	}
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: "spent", N: 10}}, nil); refused != -1 {
		t.Fatalf("a first request of 10 of 10: refused %d", refused)
	}
	var h floodgate.Hold
	if _, refused, err := s.Reserve(e.ctx, []floodgate.Ask{{Policy: p, Key: "spent", N: 1}}, nil, &h); err != nil || refused != 0 {
		t.Fatalf("Reserve of a spent key: refused %d, %v; want refused by ask 0", refused, err)
	}
	if _, err := settle(e.ctx, s, []floodgate.Ask{{Policy: p, Key: "spent", N: 1}}, &h, nil); !errors.Is(err, floodgate.ErrNotReserved) {
		t.Errorf("Settle of a refused Hold: %v; want ErrNotReserved", err)
	}

	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 3}}
	h = floodgate.Hold{}
	if _, refused, err := s.Reserve(e.ctx, asks, nil, &h); err != nil || refused != -1 {
		t.Fatalf("Reserve(%s): refused %d, %v", describe(asks), refused, err)
	}
	for _, c := range []struct {
		why  string
		asks []floodgate.Ask
		want error
	}{
		{"more asks than Reserve's", []floodgate.Ask{{Policy: p, Key: "k", N: 3}, {Policy: p, Key: "k", N: 1}}, nil},
		{"no asks", nil, nil},
		{"a negative cost", []floodgate.Ask{{Policy: p, Key: "k", N: -1}}, nil},
		{"an overrun past what a key can owe", []floodgate.Ask{{Policy: p, Key: "k", N: math.MaxInt64}}, floodgate.ErrDebtBound},
	} {
		_, err := settle(e.ctx, s, c.asks, &h, nil)
		if err == nil || errors.Is(err, floodgate.ErrSettled) || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("Settle with %s: %v; want an error (%v), not ErrSettled", c.why, err, c.want)
		}
		if h.Settled {
			t.Errorf("Settle with %s: the Hold is settled", c.why)
		}
	}
	asks[0].N = 5
	if _, err := settle(e.ctx, s, asks, &h, nil); err != nil {
		t.Fatalf("Settle after errors: %v", err)
	}
	if _, err := settle(e.ctx, s, asks, &h, nil); !errors.Is(err, floodgate.ErrSettled) {
		t.Errorf("a second Settle: %v; want ErrSettled", err)
	}
	e.holds(e.s, p, "k", 5, "a key reserved 3, settled to 5 after Settles in error and before another")
}

// reserveCheck: an ask of N 0 is a check. It charges nothing, refuses
// when a request of 1 would be refused, and Settle charges its whole
// cost.
func (r *runner) reserveCheck(t *testing.T, alg string) {
	e, s := r.settlerEnv(t)
	p, q := e.policy(alg, rule(10)), e.policy(alg, rule(5))
	var h floodgate.Hold
	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 0}, {Policy: q, Key: "k", N: 2}}
	if d, refused, err := s.Reserve(e.ctx, asks, nil, &h); err != nil || refused != -1 || !d.Allowed || !h.Admitted {
		t.Fatalf("Reserve(%s): %+v, refused %d, %v; want admitted", describe(asks), d, refused, err)
	}
	asks[0].N = 4
	if _, err := settle(e.ctx, s, asks, &h, nil); err != nil {
		t.Fatalf("Settle(%s): %v", describe(asks), err)
	}
	e.holds(e.s, p, "k", 6, "a check settled to 4 of 10")
	e.holds(e.s, q, "k", 3, "an estimate of 2 of 5 left as it was")

	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: "spent", N: 10}}, nil); refused != -1 {
		t.Fatalf("a first request of 10 of 10: refused %d", refused)
	}
	h = floodgate.Hold{}
	asks = []floodgate.Ask{{Policy: q, Key: "spent", N: 1}, {Policy: p, Key: "spent", N: 0}}
	if d, refused, err := s.Reserve(e.ctx, asks, nil, &h); err != nil || refused != 1 || d.Allowed || h.Admitted {
		t.Errorf("Reserve(%s), p spent: %+v, refused %d, %v; want refused by the check, ask 1", describe(asks), d, refused, err)
	}
	e.holds(e.s, q, "spent", 5, "q beside a check that refused")
}
