package storetest

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/counts"
)

// decide runs Decide's obligations for each algorithm, every policy of a
// request of that algorithm.
func (r *runner) decide(t *testing.T) {
	for _, alg := range r.algs {
		r.run(t, alg, func(t *testing.T) {
			r.run(t, "AllOrNothing", func(t *testing.T) { r.allOrNothing(t, alg) })
			r.run(t, "RefusedIsFirstEnforced", func(t *testing.T) { r.refusedFirst(t, alg) })
			r.run(t, "CostOutOfRange", func(t *testing.T) { r.costOutOfRange(t, alg) })
			r.run(t, "Repeats", func(t *testing.T) { r.repeats(t, alg) })
			r.run(t, "RepeatShadowAndEnforced", func(t *testing.T) { r.repeatShadowEnforced(t, alg) })
			r.run(t, "Shadows", func(t *testing.T) { r.shadows(t, alg) })
			r.run(t, "MostRestrictive", func(t *testing.T) { r.mostRestrictive(t, alg) })
			r.run(t, "Each", func(t *testing.T) { r.each(t, alg) })
			r.run(t, "KeyNotKept", func(t *testing.T) { r.keyNotKept(t, alg) })
			r.run(t, "ContextDone", func(t *testing.T) { r.contextDone(t, alg) })
			r.run(t, "Errors", func(t *testing.T) { r.errs(t, alg) })
		})
	}
}

// allOrNothing: a request is charged by every ask or by none; whichever
// ask refuses, the others keep what they held.
func (r *runner) allOrNothing(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q := e.policy(alg, rule(5)), e.policy(alg, rule(3))
	two := func(first, second floodgate.StorePolicy) []floodgate.Ask {
		return []floodgate.Ask{{Policy: first, Key: "k", N: 2}, {Policy: second, Key: "k", N: 2}}
	}
	if d, refused := e.decide(e.s, two(p, q), nil); refused != -1 || !d.Allowed {
		t.Fatalf("2 of 5 and 2 of 3, both full: refused %d, %+v; want admitted", refused, d)
	}
	// q holds 1 now: each order refuses by q, and charges p nothing.
	if d, refused := e.decide(e.s, two(p, q), nil); refused != 1 || d.Allowed {
		t.Fatalf("2 of 3 and 2 of 1: refused %d, %+v; want refused by ask 1", refused, d)
	}
	if d, refused := e.decide(e.s, two(q, p), nil); refused != 0 || d.Allowed {
		t.Fatalf("2 of 1 and 2 of 3: refused %d, %+v; want refused by ask 0", refused, d)
	}
	e.holds(e.s, p, "k", 3, "p after one admission of 2 and two refusals")
	e.holds(e.s, q, "k", 1, "q after one admission of 2 and two refusals")
}

// refusedFirst: refused is the index of the first enforced ask that
// refuses, past a shadow that refuses before it, and the Decision is
// that ask's answer; the others are charged nothing.
func (r *runner) refusedFirst(t *testing.T, alg string) {
	e := r.newEnv(t)
	p := e.policy(alg, rule(5))
	spent := []floodgate.StorePolicy{e.policy(alg, rule(1)), e.policy(alg, rule(1)), e.policy(alg, rule(1))}
	for _, s := range spent {
		if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: s, Key: "k", N: 1}}, nil); refused != -1 {
			t.Fatalf("a first request of 1 of 1: refused %d", refused)
		}
	}
	asks := []floodgate.Ask{
		{Policy: p, Key: "k", N: 1},
		{Policy: spent[0], Key: "k", N: 1, Shadow: true},
		{Policy: spent[1], Key: "k", N: 1},
		{Policy: spent[2], Key: "k", N: 1},
	}
	each := make([]floodgate.Decision, len(asks))
	d, refused := e.decide(e.s, asks, each)
	if refused != 2 || d.Allowed {
		t.Fatalf("%s, asks 1 (a shadow), 2 and 3 spent: refused %d, %+v; want refused by ask 2, the first enforced one", describe(asks), refused, d)
	}
	if d != each[2] {
		t.Errorf("the Decision %+v is not the refusing ask's answer %+v", d, each[2])
	}
	e.holds(e.s, p, "k", 5, "the admitting ask of a refused request")
}

// costOutOfRange: an ask whose N is below 1 or above its capacity
// refuses before anything is charged, with RetryAfter Never, as an
// enforced refusal or as a shadow's.
func (r *runner) costOutOfRange(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q := e.policy(alg, rule(5)), e.policy(alg, rule(5))
	for _, n := range []int64{0, -1, 6, math.MaxInt64, math.MinInt64} {
		for _, at := range []int{0, 1} {
			asks := []floodgate.Ask{{Policy: p, Key: "k", N: 1}, {Policy: p, Key: "k", N: 1}}
			asks[at] = floodgate.Ask{Policy: q, Key: "k", N: n}
			each := make([]floodgate.Decision, 2)
			d, refused := e.decide(e.s, asks, each)
			if refused != at || d.Allowed || d.RetryAfter != floodgate.Never || each[at].RetryAfter != floodgate.Never {
				t.Errorf("%s: refused %d, %+v, each[%d] %+v; want refused by ask %d with RetryAfter Never", describe(asks), refused, d, at, each[at], at)
			}
		}
		asks := []floodgate.Ask{{Policy: q, Key: "alone", N: n}}
		if d, refused := e.decide(e.s, asks, nil); refused != 0 || d.Allowed || d.RetryAfter != floodgate.Never {
			t.Errorf("%s: refused %d, %+v; want refused with RetryAfter Never", describe(asks), refused, d)
		}
	}
	e.holds(e.s, p, "k", 5, "p beside asks of q whose cost no state holds")
	e.holds(e.s, q, "k", 5, "q, asked for costs no state holds")
	e.holds(e.s, q, "alone", 5, "q, asked alone for costs no state holds")

	// A shadow's refuses as a shadow: the request is admitted, and
	// charged by the enforced ask.
	asks := []floodgate.Ask{{Policy: p, Key: "s", N: 1}, {Policy: q, Key: "s", N: 6, Shadow: true}}
	each := make([]floodgate.Decision, 2)
	d, refused := e.decide(e.s, asks, each)
	if refused != 1 || !d.Allowed || each[1].RetryAfter != floodgate.Never || d != each[0] {
		t.Errorf("%s: refused %d, %+v, each %+v; want admitted with the enforced ask's answer, the shadow refusing with RetryAfter Never", describe(asks), refused, d, each)
	}
	e.holds(e.s, p, "s", 4, "the enforced ask beside a shadow of too large a cost")
	e.holds(e.s, q, "s", 5, "the shadow of too large a cost")
}

// repeats: asks of one policy and key are one ask of their summed cost,
// whose answer each receives.
func (r *runner) repeats(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q := e.policy(alg, rule(5)), e.policy(alg, rule(5))
	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 2}, {Policy: q, Key: "k", N: 1}, {Policy: p, Key: "k", N: 3}}
	each := make([]floodgate.Decision, 3)
	if d, refused := e.decide(e.s, asks, each); refused != -1 || !d.Allowed {
		t.Fatalf("%s, 2 and 3 of p's 5: refused %d, %+v; want admitted", describe(asks), refused, d)
	}
	if each[0] != each[2] {
		t.Errorf("%s: the repeats answered %+v and %+v; want one answer", describe(asks), each[0], each[2])
	}
	e.holds(e.s, p, "k", 0, "p after a request of 2 and 3 of its 5")
	e.holds(e.s, q, "k", 4, "q after a request of 1")

	// Summed past the capacity: a cost no state holds.
	asks = []floodgate.Ask{{Policy: p, Key: "over", N: 3}, {Policy: p, Key: "over", N: 3}}
	d, refused := e.decide(e.s, asks, each)
	if refused != 0 || d.Allowed || d.RetryAfter != floodgate.Never || each[0] != each[1] {
		t.Errorf("%s, 6 of a capacity of 5: refused %d, %+v, each %+v; want refused by ask 0 with RetryAfter Never, one answer for both", describe(asks), refused, d, each[:2])
	}
	asks = []floodgate.Ask{{Policy: p, Key: "over", N: math.MaxInt64}, {Policy: p, Key: "over", N: math.MaxInt64}}
	if d, refused := e.decide(e.s, asks, nil); refused != 0 || d.Allowed || d.RetryAfter != floodgate.Never {
		t.Errorf("%s, whose sum overflows: refused %d, %+v; want refused by ask 0 with RetryAfter Never", describe(asks), refused, d)
	}
	e.holds(e.s, p, "over", 5, "p after repeats whose sum no state holds")

	// Summed past what the key holds: refused, each the same refusal.
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: p, Key: "short", N: 2}}, nil); refused != -1 {
		t.Fatalf("a first request of 2 of 5: refused %d", refused)
	}
	asks = []floodgate.Ask{{Policy: p, Key: "short", N: 2}, {Policy: q, Key: "short", N: 1}, {Policy: p, Key: "short", N: 2}}
	d, refused = e.decide(e.s, asks, each)
	if refused != 0 || d.Allowed || each[0] != each[2] || each[0].Allowed {
		t.Errorf("%s, 2 and 2 of the 3 p holds: refused %d, %+v, each %+v; want refused by ask 0, one refusal for both", describe(asks), refused, d, each)
	}
	e.holds(e.s, p, "short", 3, "p after repeats that the key could not hold")
	e.holds(e.s, q, "short", 5, "q beside them")

	// Other keys are other asks.
	asks = []floodgate.Ask{{Policy: p, Key: "a", N: 3}, {Policy: p, Key: "b", N: 3}}
	if d, refused := e.decide(e.s, asks, nil); refused != -1 || !d.Allowed {
		t.Errorf("%s, two keys: refused %d, %+v; want admitted", describe(asks), refused, d)
	}
}

// repeatShadowEnforced: one policy and key asked once as a shadow and
// once enforced is an error, before anything is charged.
func (r *runner) repeatShadowEnforced(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q := e.policy(alg, rule(5)), e.policy(alg, rule(5))
	for _, asks := range [][]floodgate.Ask{
		{{Policy: p, Key: "k", N: 1}, {Policy: p, Key: "k", N: 1, Shadow: true}},
		{{Policy: p, Key: "k", N: 1, Shadow: true}, {Policy: q, Key: "k", N: 1}, {Policy: p, Key: "k", N: 1}},
	} {
		d, _, err := e.s.Decide(e.ctx, asks, nil)
		if err == nil || d.Allowed {
			t.Errorf("%s: %+v, %v; want an error and a refusal", describe(asks), d, err)
		}
	}
	e.holds(e.s, p, "k", 5, "p after requests in error")
	e.holds(e.s, q, "k", 5, "q after a request in error")
}

// shadows: a shadow counts and refuses nothing. When only shadows
// refuse, the request is admitted and charged by the enforced asks
// alone; refused is the first refusing shadow, and the Decision the most
// restrictive enforced answer (the refusing shadow's when every ask is a
// shadow). When nothing refuses, the shadows are charged too.
func (r *runner) shadows(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, tight := e.policy(alg, rule(5)), e.policy(alg, rule(2))
	a, b, c := e.policy(alg, rule(3)), e.policy(alg, rule(1)), e.policy(alg, rule(1))
	for _, key := range []string{"k", "all", "first", "enforced"} {
		for _, s := range []floodgate.StorePolicy{b, c} {
			if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: s, Key: key, N: 1}}, nil); refused != -1 {
				t.Fatalf("a first request of 1 of 1: refused %d", refused)
			}
		}
	}

	asks := []floodgate.Ask{{Policy: p, Key: "k", N: 1}, {Policy: tight, Key: "k", N: 1}, {Policy: a, Key: "k", N: 1, Shadow: true}, {Policy: b, Key: "k", N: 1, Shadow: true}}
	each := make([]floodgate.Decision, len(asks))
	d, refused := e.decide(e.s, asks, each)
	if refused != 3 || !d.Allowed || d != each[1] {
		t.Errorf("%s, shadow 3 spent: refused %d, %+v, each %+v; want admitted, refused 3, the Decision each[1] (the fewest remaining of the enforced)", describe(asks), refused, d, each)
	}
	e.holds(e.s, p, "k", 4, "an enforced ask of a request that a shadow refused")
	e.holds(e.s, tight, "k", 1, "an enforced ask of a request that a shadow refused")
	e.holds(e.s, a, "k", 3, "a shadow that passed in a request that another shadow refused")

	asks = []floodgate.Ask{{Policy: a, Key: "all", N: 1, Shadow: true}, {Policy: b, Key: "all", N: 1, Shadow: true}, {Policy: c, Key: "all", N: 1, Shadow: true}}
	d, refused = e.decide(e.s, asks, each)
	if refused != 1 || d != each[1] {
		t.Errorf("%s, every ask a shadow, 1 and 2 spent: refused %d, %+v, each %+v; want refused 1, the Decision its answer", describe(asks), refused, d, each[:3])
	}
	e.holds(e.s, a, "all", 3, "a shadow that passed beside shadows that refused")

	asks = []floodgate.Ask{{Policy: b, Key: "first", N: 1, Shadow: true}, {Policy: p, Key: "first", N: 1}, {Policy: c, Key: "first", N: 1, Shadow: true}}
	if d, refused := e.decide(e.s, asks, nil); refused != 0 || !d.Allowed {
		t.Errorf("%s, shadows 0 and 2 spent: refused %d, %+v; want admitted, refused 0", describe(asks), refused, d)
	}
	e.holds(e.s, p, "first", 4, "the enforced ask between two refusing shadows")

	// An enforced refusal comes first, whatever shadow refused before it;
	// a shadow is then charged nothing.
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: tight, Key: "enforced", N: 2}}, nil); refused != -1 {
		t.Fatalf("a first request of 2 of 2: refused %d", refused)
	}
	asks = []floodgate.Ask{{Policy: b, Key: "enforced", N: 1, Shadow: true}, {Policy: a, Key: "enforced", N: 1, Shadow: true}, {Policy: tight, Key: "enforced", N: 1}}
	if d, refused := e.decide(e.s, asks, nil); refused != 2 || d.Allowed {
		t.Errorf("%s, shadow 0 and enforced 2 spent: refused %d, %+v; want refused by ask 2", describe(asks), refused, d)
	}
	e.holds(e.s, a, "enforced", 3, "a shadow of a refused request")

	asks = []floodgate.Ask{{Policy: p, Key: "none", N: 1}, {Policy: a, Key: "none", N: 2, Shadow: true}}
	if d, refused := e.decide(e.s, asks, nil); refused != -1 || !d.Allowed {
		t.Errorf("%s: refused %d, %+v; want admitted", describe(asks), refused, d)
	}
	e.holds(e.s, a, "none", 1, "a shadow of a request that nothing refused")
}

// mostRestrictive: an admitted request's Decision is the answer with the
// fewest remaining, the longest ResetAfter among equals.
func (r *runner) mostRestrictive(t *testing.T, alg string) {
	e := r.newEnv(t)
	wide, tight := e.policy(alg, rule(10)), e.policy(alg, rule(3))
	slow := e.policy(alg, floodgate.Rule{Limit: 10, Period: 100 * time.Minute})
	for _, asks := range [][]floodgate.Ask{
		{{Policy: wide, Key: "a", N: 1}, {Policy: tight, Key: "a", N: 1}},
		{{Policy: tight, Key: "b", N: 1}, {Policy: wide, Key: "b", N: 1}},
		{{Policy: wide, Key: "c", N: 1}, {Policy: slow, Key: "c", N: 1}},
		{{Policy: slow, Key: "d", N: 1}, {Policy: wide, Key: "d", N: 1}},
		{{Policy: wide, Key: "e", N: 4}, {Policy: tight, Key: "e", N: 1}, {Policy: slow, Key: "e", N: 2}},
	} {
		each := make([]floodgate.Decision, len(asks))
		d, refused := e.decide(e.s, asks, each)
		if refused != -1 {
			t.Fatalf("%s: refused %d", describe(asks), refused)
		}
		if v := verdict(each, nil); !sameAnswer(d, each, v) {
			t.Errorf("%s: the Decision %+v, each %+v; want the fewest remaining, the longest ResetAfter among equals: each[%d]", describe(asks), d, each, v)
		}
	}
}

// verdict is the index of the most restrictive of all's answers: the
// fewest remaining, then the longest ResetAfter, among those that skip
// does not exclude.
func verdict(all []floodgate.Decision, skip func(i int) bool) int {
	best := -1
	for i, d := range all {
		if skip != nil && skip(i) {
			continue
		}
		if best < 0 || d.Remaining < all[best].Remaining || d.Remaining == all[best].Remaining && d.ResetAfter > all[best].ResetAfter {
			best = i
		}
	}
	return best
}

// sameAnswer reports whether d is all[v], or another answer that ties
// with it in Remaining and ResetAfter (which the order leaves open).
func sameAnswer(d floodgate.Decision, all []floodgate.Decision, v int) bool {
	for _, a := range all {
		if a == d && a.Remaining == all[v].Remaining && a.ResetAfter == all[v].ResetAfter {
			return true
		}
	}
	return false
}

// each: each, nil or up to len(asks) long, receives what each ask
// decided if it charged the request or refused it, and a Peek's answer
// for the others (or, for an ask of N above 1 whose cost would not pass,
// a refusal with Remaining 0).
func (r *runner) each(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q, w := e.policy(alg, rule(5)), e.policy(alg, rule(3)), e.policy(alg, rule(4))
	peek := func(p floodgate.StorePolicy, key string) floodgate.Decision {
		t.Helper()
		d, err := p.Peek(e.ctx, key)
		if err != nil {
			t.Fatalf("Peek(%q): %v", key, err)
		}
		return d
	}

	// Admitted: each ask's answer after its charge, which a Peek then
	// continues.
	asks := []floodgate.Ask{{Policy: p, Key: "a", N: 2}, {Policy: q, Key: "a", N: 1}, {Policy: w, Key: "a", N: 4}}
	each := make([]floodgate.Decision, len(asks))
	if _, refused := e.decide(e.s, asks, each); refused != -1 {
		t.Fatalf("%s: refused %d", describe(asks), refused)
	}
	for i, a := range asks {
		got, after := each[i], peek(a.Policy, a.Key)
		if !got.Allowed || after.Allowed != (got.Remaining > 0) || after.Allowed && after.Remaining != got.Remaining-1 {
			t.Errorf("%s: each[%d] %+v, and a Peek after %+v; want an admission whose Remaining the Peek continues", describe(asks), i, got, after)
		}
	}

	// Refused: the refusal, and Peeks.
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: q, Key: "r", N: 3}, {Policy: w, Key: "r", N: 2}}, nil); refused != -1 {
		t.Fatalf("first requests of 3 of 3 and 2 of 4: refused %d", refused)
	}
	asks = []floodgate.Ask{{Policy: p, Key: "r", N: 1}, {Policy: q, Key: "r", N: 1}, {Policy: w, Key: "r", N: 1}}
	each = make([]floodgate.Decision, len(asks))
	d, refused := e.decide(e.s, asks, each)
	if refused != 1 {
		t.Fatalf("%s, q spent: refused %d; want 1", describe(asks), refused)
	}
	if each[1] != d || each[1].Allowed {
		t.Errorf("%s: each[1] %+v, the Decision %+v; want the refusal in both", describe(asks), each[1], d)
	}
	for _, i := range []int{0, 2} {
		if want := peek(asks[i].Policy, "r"); each[i] != want {
			t.Errorf("%s: each[%d] %+v; want what Peek answers, %+v", describe(asks), i, each[i], want)
		}
	}
	// An uncharged ask of N above 1: a Peek's answer, or a refusal with
	// Remaining 0 if its cost would not pass (w holds 2).
	asks = []floodgate.Ask{{Policy: p, Key: "r", N: 3}, {Policy: q, Key: "r", N: 1}, {Policy: w, Key: "r", N: 3}}
	if _, refused := e.decide(e.s, asks, each); refused != 1 {
		t.Fatalf("%s, q spent: refused %d; want 1", describe(asks), refused)
	}
	if want := peek(p, "r"); each[0] != want {
		t.Errorf("%s: each[0] %+v; want what Peek answers, %+v, since its cost would pass", describe(asks), each[0], want)
	}
	if want := peek(w, "r"); each[2] != want && (each[2].Allowed || each[2].Remaining != 0) {
		t.Errorf("%s: each[2] %+v; want what Peek answers, %+v, or a refusal with Remaining 0", describe(asks), each[2], want)
	}

	// A shadow's refusal: the enforced ask's charge, the passing
	// shadow's Peek.
	if _, refused := e.decide(e.s, []floodgate.Ask{{Policy: q, Key: "s", N: 3}}, nil); refused != -1 {
		t.Fatalf("a first request of 3 of 3: refused %d", refused)
	}
	asks = []floodgate.Ask{{Policy: p, Key: "s", N: 1}, {Policy: w, Key: "s", N: 1, Shadow: true}, {Policy: q, Key: "s", N: 1, Shadow: true}}
	d, refused = e.decide(e.s, asks, each)
	if refused != 2 || d != each[0] || !each[0].Allowed || each[2].Allowed {
		t.Errorf("%s, shadow 2 spent: refused %d, %+v, each %+v; want refused 2, the Decision each[0]", describe(asks), refused, d, each)
	}
	if want := peek(w, "s"); each[1] != want {
		t.Errorf("%s: each[1], an uncharged shadow, %+v; want what Peek answers, %+v", describe(asks), each[1], want)
	}

	// Short and nil: the same answers, as far as each goes.
	for _, n := range []int{0, 1, 2} {
		full := make([]floodgate.Decision, 3)
		short := make([]floodgate.Decision, n)
		if n == 0 {
			short = nil
		}
		keyFull, keyShort := "full"+string(rune('0'+n)), "short"+string(rune('0'+n))
		mk := func(key string) []floodgate.Ask {
			return []floodgate.Ask{{Policy: p, Key: key, N: 2}, {Policy: q, Key: key, N: 1}, {Policy: w, Key: key, N: 1}}
		}
		dFull, rFull := e.decide(e.s, mk(keyFull), full)
		dShort, rShort := e.decide(e.s, mk(keyShort), short)
		if dFull != dShort || rFull != rShort {
			t.Errorf("each of %d: %+v refused %d; with a full each, on another key: %+v refused %d", n, dShort, rShort, dFull, rFull)
		}
		for i := range short {
			if short[i] != full[i] {
				t.Errorf("each of %d: each[%d] %+v; with a full each, on another key: %+v", n, i, short[i], full[i])
			}
		}
	}
}

// keyNotKept: Decide and Peek keep no reference to a Key once they
// return: a caller may pass a view of a buffer it reuses.
func (r *runner) keyNotKept(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q := e.policy(alg, rule(3)), e.policy(alg, rule(3))
	for i, c := range []struct {
		asks         []floodgate.Ask
		wantP, wantQ int64
	}{
		{[]floodgate.Ask{{Policy: p, N: 3}}, 0, 3},
		{[]floodgate.Ask{{Policy: q, N: 3}, {Policy: p, N: 1}}, 2, 0},
	} {
		buf := []byte("client-A" + string(rune('0'+i)))
		view := unsafe.String(unsafe.SliceData(buf), len(buf))
		for j := range c.asks {
			c.asks[j].Key = view
		}
		if _, refused := e.decide(e.s, c.asks, nil); refused != -1 {
			t.Fatalf("%s, a new key: refused %d", describe(c.asks), refused)
		}
		if _, err := p.Peek(e.ctx, view); err != nil {
			t.Fatal(err)
		}
		was := string(buf)
		copy(buf, "client-B")
		now := string(buf)
		for j := range buf {
			buf[j] = 'x'
		}
		// The state is under the key that was asked, and the key the
		// buffer held next is new.
		e.holds(e.s, p, was, c.wantP, "p's key, asked by a view of a buffer that changed since")
		e.holds(e.s, q, was, c.wantQ, "q's key, asked by a view of a buffer that changed since")
		e.holds(e.s, p, now, 3, "p's key that the buffer held next, never asked")
		e.holds(e.s, q, now, 3, "q's key that the buffer held next, never asked")
	}
}

// contextDone: a request whose ctx ended before the call is refused
// with ctx's error and charged nothing, or, by a Store that does not
// wait and so decides before it can notice (as the Store's own
// documentation says), decided as a live one.
func (r *runner) contextDone(t *testing.T, alg string) {
	e := r.newEnv(t)
	p, q := e.policy(alg, rule(5)), e.policy(alg, rule(5))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, stop := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer stop()
	held := int64(5)
	for _, c := range []struct {
		ctx  context.Context
		want error
		asks []floodgate.Ask
	}{
		{cancelled, context.Canceled, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}},
		{cancelled, context.Canceled, []floodgate.Ask{{Policy: p, Key: "k", N: 1}, {Policy: q, Key: "k", N: 1}}},
		{expired, context.DeadlineExceeded, []floodgate.Ask{{Policy: p, Key: "k", N: 1}}},
		{expired, context.DeadlineExceeded, []floodgate.Ask{{Policy: q, Key: "k", N: 1}, {Policy: p, Key: "k", N: 1}}},
	} {
		d, refused, err := e.s.Decide(c.ctx, c.asks, nil)
		switch {
		case err != nil:
			if !errors.Is(err, c.want) || d.Allowed || refused < 0 || refused >= len(c.asks) {
				t.Errorf("%s with a ctx that ended: %+v, refused %d, %v; want a refusal with ctx's error (%v)", describe(c.asks), d, refused, err, c.want)
			}
		case refused != -1 || !d.Allowed:
			t.Errorf("%s with a ctx that ended: %+v, refused %d and no error; want ctx's error, or the admission a live ctx gets", describe(c.asks), d, refused)
		default:
			held--
		}
		if _, err := p.Peek(c.ctx, "k"); err != nil && !errors.Is(err, c.want) {
			t.Errorf("Peek with a ctx that ended: %v; want nil or ctx's error (%v)", err, c.want)
		}
	}
	e.holds(e.s, p, "k", held, "p after requests whose ctx had ended, as many admitted as had no error")
}

// errs: no asks, too many, and a policy of another Store are errors
// before anything is charged, with the request refused.
func (r *runner) errs(t *testing.T, alg string) {
	e := r.newEnv(t)
	p := e.policy(alg, rule(2))
	o := e.store()
	other := e.policyNamed(o, e.name(), alg, rule(2))
	many := make([]floodgate.Ask, floodgate.MaxPolicies+1)
	for i := range many {
		many[i] = floodgate.Ask{Policy: p, Key: string(rune('a' + i)), N: 1}
	}
	for _, c := range []struct {
		why  string
		asks []floodgate.Ask
	}{
		{"no asks", nil},
		{"no asks", []floodgate.Ask{}},
		{"MaxPolicies+1 asks", many},
		{"a policy of another Store", []floodgate.Ask{{Policy: p, Key: "a", N: 1}, {Policy: other, Key: "a", N: 1}}},
		{"a policy of another Store", []floodgate.Ask{{Policy: other, Key: "a", N: 1}, {Policy: p, Key: "a", N: 1}}},
		{"a policy of another kind", []floodgate.Ask{{Policy: p, Key: "a", N: 1}, {Policy: stranger{}, Key: "a", N: 1}}},
	} {
		d, _, err := e.s.Decide(e.ctx, c.asks, nil)
		if err == nil || d.Allowed {
			t.Errorf("%s: %+v, %v; want an error and a refusal", c.why, d, err)
		}
	}
	e.holds(e.s, p, "a", 2, "p after requests in error")
	e.holds(o, other, "a", 2, "the other Store's policy after requests in error")
}

// stranger is a StorePolicy that no Store made.
type stranger struct{}

func (stranger) Peek(context.Context, string) (floodgate.Decision, error) {
	return floodgate.Decision{}, nil
}
func (stranger) SetRule(floodgate.Rule) error                     { return nil }
func (stranger) AppendCounts(dst []counts.Sample) []counts.Sample { return dst }
func (stranger) Close() error                                     { return nil }
