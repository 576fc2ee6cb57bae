package shardlog

import (
	"errors"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
)

// debtor is what both logs offer beyond twin: charges and grants that can
// be refunded in part.
type debtor interface {
	twin
	ChargeN(now, n int64) (Decision, bool, error)
	AllowGrant(now, n int64) (Decision, Grant, bool)
	RefundGrant(g Grant, m int64) (bool, error)
	SettleGrant(g Grant, m, now int64) (Decision, bool, error)
}

type debtMaker struct {
	name string
	new  func(p Params, now int64) debtor
	succ func(s debtor, now int64) debtor
}

func debtMakers(t testing.TB) []debtMaker {
	makers := []debtMaker{{"mutex",
		func(p Params, now int64) debtor { return NewMutex(p, now) },
		func(s debtor, now int64) debtor { return s.(*MutexLog).Successor(now) }}}
	if lockFreeLog {
		makers = append(makers, debtMaker{"lockfree",
			func(p Params, now int64) debtor { return New(p, now) },
			func(s debtor, now int64) debtor { return s.(*Log).Successor(now) }})
	} else {
		t.Log("no 16-byte CAS here: only the mutex log runs")
	}
	return makers
}

// owes is a Decision with what it owes, written short for tables.
func owes(allowed bool, limit, remaining int64, retryAfter, resetAfter time.Duration, owed int64) Decision {
	d := dec(allowed, limit, remaining, retryAfter, resetAfter)
	d.Owed = owed
	return d
}

// ringCap is the most entries the ring of a log of p may hold: the power
// of two at or above 2(Bound+2).
func ringCap(p Params) uint64 { return 1 << bits.Len64(uint64(2*(p.Bound()+2))-1) }

// TestChargeTable: a charge into debt, refusals while the key owes, the
// debt aging out, readings from the past, the bound, and each Decision's
// fields, on both logs.
func TestChargeTable(t *testing.T) {
	const T = int64(time.Second)
	S := time.Second
	const (
		allow = iota
		take
		peek
		charge
	)
	steps := []struct {
		op    int
		at, n int64
		want  Decision
		err   error // ErrDebtBound, or errAny for another error
	}{
		// Into debt: 5 on a limit of 3. A request of 1 waits for the
		// charge itself to leave.
		{charge, 0, 5, owes(true, 3, 0, S, S, 2), nil},
		{allow, T / 2, 1, owes(false, 3, 0, S/2, S/2, 2), nil},
		{take, T / 2, 1, Decision{}, nil},
		{peek, T / 2, 1, owes(false, 3, 0, S/2, S/2, 2), nil},
		// More debt: 4 must leave before a request of 1 fits, which the
		// charge at 0 carries.
		{charge, T / 2, 1, owes(true, 3, 0, S/2, S, 3), nil},
		{allow, T - 1, 1, owes(false, 3, 0, 1, S/2+1, 3), nil},
		// At T the first charge ages out: 1 left, room for 2.
		{allow, T, 1, owes(true, 3, 1, 0, S, 0), nil},
		{charge, T, 1, owes(true, 3, 0, S/2, S, 0), nil},
		{allow, T, 1, owes(false, 3, 0, S/2, S, 0), nil},
		// The bound is 256 × 3 = 768: past it nothing is charged, and the
		// answer is the key as it stands.
		{charge, T, 2000, owes(false, 3, 0, S/2, S, 0), ErrDebtBound},
		{charge, T, 0, Decision{}, errAny},
		{charge, T, -7, Decision{}, errAny},
		{charge, T, 765, owes(true, 3, 0, S, S, 765), nil},
		{charge, T, 1, owes(false, 3, 0, S, S, 765), ErrDebtBound},
		{allow, 3 * T / 2, 1, owes(false, 3, 0, S/2, S/2, 764), nil},
		{allow, 2 * T, 3, owes(true, 3, 0, 0, S, 0), nil},
		// A reading from the past is charged at the newest entry's time.
		{charge, T / 4, 3, owes(true, 3, 0, 11*S/4, 11*S/4, 3), nil},
		{allow, 3 * T, 4, owes(false, 3, 3, Never, 0, 0), nil},
		{allow, 3 * T, 3, owes(true, 3, 0, 0, S, 0), nil},
	}
	p := mustParams(t, 3, time.Second)
	if p.Bound() != 768 {
		t.Fatalf("Bound() = %d, want 768", p.Bound())
	}
	for _, m := range debtMakers(t) {
		s := m.new(p, 0)
		for i, st := range steps {
			var got Decision
			var err error
			live := true
			switch st.op {
			case allow:
				got, live = s.AllowN(st.at, st.n)
			case take:
				var ok bool
				ok, live = s.Take(st.at, st.n)
				got = Decision{Allowed: ok}
			case peek:
				got, live = s.Peek(st.at)
			case charge:
				got, live, err = s.ChargeN(st.at, st.n)
			}
			if !live || got != st.want {
				t.Errorf("%s step %d (%d at %v, n=%d): got %+v, want %+v", m.name, i, st.op, time.Duration(st.at), st.n, got, st.want)
			}
			switch {
			case st.err == nil && err != nil, st.err != nil && err == nil:
				t.Errorf("%s step %d: error %v, want %v", m.name, i, err, st.err)
			case st.err == ErrDebtBound && !errors.Is(err, ErrDebtBound):
				t.Errorf("%s step %d: error %v does not wrap ErrDebtBound", m.name, i, err)
			case st.err == ErrDebtBound && !strings.Contains(err.Error(), "768"):
				t.Errorf("%s step %d: error %q does not name the bound", m.name, i, err)
			case st.err == errAny && errors.Is(err, ErrDebtBound):
				t.Errorf("%s step %d: a charge below 1 is not a debt: %v", m.name, i, err)
			}
		}
	}
}

var errAny = errors.New("any error")

// TestChargeRefusedInDebt: a key that owes refuses every admission,
// through AllowN, Take and AllowGrant, at every reading until enough has
// aged out, and admits exactly from then on.
func TestChargeRefusedInDebt(t *testing.T) {
	const T = 1000
	p := mustParams(t, 10, T)
	for _, m := range debtMakers(t) {
		s := m.new(p, 0)
		// 8 at 0, a charge of 30 at 100: the key owes 28 until 1000, when
		// the 8 leave (30 > 10 still), and 20 until 1100.
		s.AllowN(0, 8)
		if d, _, err := s.ChargeN(100, 30); err != nil || d.Owed != 28 || d.RetryAfter != T {
			t.Fatalf("%s: charge: %+v %v", m.name, d, err)
		}
		for now := int64(100); now < 1100; now += 7 {
			for _, n := range []int64{1, 5, 10} {
				d, _ := s.AllowN(now, n)
				ok, _ := s.Take(now, n)
				dg, g, _ := s.AllowGrant(now, n)
				if d.Allowed || ok || dg.Allowed || g != (Grant{}) {
					t.Fatalf("%s: admitted %d at %d while owing: %+v", m.name, n, now, d)
				}
				if want := time.Duration(1100 - now); d.RetryAfter != want || d.Owed == 0 {
					t.Fatalf("%s: denial at %d: %+v, want RetryAfter %v", m.name, now, d, want)
				}
			}
		}
		if d, _ := s.AllowN(1100, 10); !d.Allowed || d.Owed != 0 {
			t.Fatalf("%s: the debt aged out at 1100, yet %+v", m.name, d)
		}
	}
}

// TestChargeBound: the bound at limit 1, at the largest limit, and a key
// charged its bound in cost-1 entries, whose ring stays within what the
// bound allows.
func TestChargeBound(t *testing.T) {
	if p1 := mustParams(t, 1, 10); p1.Bound() != 256 {
		t.Fatalf("Bound at limit 1 = %d, want 256", p1.Bound())
	}
	top := mustParams(t, maxLogLimit, time.Hour)
	if top.Bound() != maxLogLimit || ringCap(top) != 1<<23 {
		t.Fatalf("at the largest limit: Bound %d, ring %d; want %d and 2^23", top.Bound(), ringCap(top), maxLogLimit)
	}
	for _, m := range debtMakers(t) {
		// The largest limit: no room to owe.
		s := m.new(top, 0)
		if _, _, err := s.ChargeN(0, maxLogLimit); err != nil {
			t.Fatalf("%s: a charge of the whole bound: %v", m.name, err)
		}
		if d, _, err := s.ChargeN(1, 1); !errors.Is(err, ErrDebtBound) || d.Owed != 0 || d.Remaining != 0 {
			t.Fatalf("%s: a charge past the largest bound: %+v %v", m.name, d, err)
		}

		// Limit 1: 256 charges of 1, the 257th refused; nothing charged.
		p := mustParams(t, 1, 10)
		s = m.new(p, 0)
		for i := range 256 {
			if d, _, err := s.ChargeN(0, 1); err != nil || d.Owed != int64(i) {
				t.Fatalf("%s: charge %d: %+v %v", m.name, i, d, err)
			}
		}
		if _, _, err := s.ChargeN(0, 1); !errors.Is(err, ErrDebtBound) {
			t.Fatalf("%s: the 257th charge of 1 on limit 1: %v", m.name, err)
		}
		if d, _ := s.Peek(9); d.Owed != 255 || d.RetryAfter != 1 {
			t.Fatalf("%s: after the refused charge: %+v", m.name, d)
		}
		if d, _ := s.AllowN(10, 1); !d.Allowed {
			t.Fatalf("%s: the debt did not age out: %+v", m.name, d)
		}
		if l, ok := s.(*Log); ok {
			if c := l.ring.Load().capacity(); c > ringCap(p) {
				t.Fatalf("256 entries in a window took a ring of %d, above %d", c, ringCap(p))
			}
		}
	}
}

// TestChargeMemory: a key charged its whole bound in entries of 1, at
// limit 1,000, takes at most the ring the bound allows.
func TestChargeMemory(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	p := mustParams(t, 1000, time.Second)
	l := New(p, 0)
	for i := range p.Bound() {
		if _, _, err := l.ChargeN(i, 1); err != nil {
			t.Fatalf("charge %d: %v", i, err)
		}
	}
	if _, _, err := l.ChargeN(p.Bound(), 1); !errors.Is(err, ErrDebtBound) {
		t.Fatalf("a charge past 256,000 in the window: %v", err)
	}
	if c := l.ring.Load().capacity(); c > ringCap(p) || ringCap(p) != 1<<19 {
		t.Fatalf("the ring holds %d entries, the bound allows %d", c, ringCap(p))
	}
}

// TestRefundGrant: a partial refund of the newest entry is exact; it
// lapses once another entry landed, once the entry was refunded, and once
// the log retired; its arguments are checked. Both logs alike.
func TestRefundGrant(t *testing.T) {
	p := mustParams(t, 10, time.Second)
	for _, m := range debtMakers(t) {
		s := m.new(p, 0)
		_, g1, _ := s.AllowGrant(0, 4)
		if g1.Cost() != 4 {
			t.Fatalf("%s: Grant %+v", m.name, g1)
		}
		for _, bad := range []struct {
			g Grant
			m int64
		}{{g1, 5}, {g1, 0}, {g1, -1}, {Grant{}, 1}} {
			if ok, err := s.RefundGrant(bad.g, bad.m); ok || err == nil {
				t.Fatalf("%s: RefundGrant(%+v, %d) = %v, %v", m.name, bad.g, bad.m, ok, err)
			}
		}
		mustRefund(t, m.name, s, g1, 3, true)
		if d, _ := s.Peek(0); d.Remaining != 8 {
			t.Fatalf("%s: 4 granted, 3 refunded: %+v", m.name, d)
		}
		mustRefund(t, m.name, s, g1, 1, false) // refunded once
		s.Refund(0, 1)                         // nor by Refund
		if d, _ := s.Peek(0); d.Remaining != 8 {
			t.Fatalf("%s: a second refund of one entry landed: %+v", m.name, d)
		}

		_, g2, _ := s.AllowGrant(1, 2)
		_, g3, _ := s.AllowGrant(1, 3)
		mustRefund(t, m.name, s, g2, 1, false) // another entry landed after it
		mustRefund(t, m.name, s, g3, 3, true)  // the whole of it
		if d, _ := s.Peek(2); d.Remaining != 6 {
			t.Fatalf("%s: 1 + 2 held: %+v", m.name, d)
		}
		// A charge lands after g4: g4 lapses; the charge took its units.
		_, g4, _ := s.AllowGrant(3, 5)
		s.ChargeN(3, 20)
		mustRefund(t, m.name, s, g4, 5, false)
		d, g5, _ := s.AllowGrant(4, 1)
		if d.Allowed || g5 != (Grant{}) || d.Owed != 18 {
			t.Fatalf("%s: in debt: %+v %+v", m.name, d, g5)
		}

		// A retired log's grants lapse.
		s = m.succ(s, 0)
		if s.RetireIdle(5 * int64(time.Second)) {
			s = m.succ(s, 5*int64(time.Second))
		}
		_, g6, _ := s.AllowGrant(6*int64(time.Second), 2)
		s.Retire()
		mustRefund(t, m.name, s, g6, 1, false)
	}
}

func mustRefund(t *testing.T, name string, s debtor, g Grant, m int64, want bool) {
	t.Helper()
	if ok, err := s.RefundGrant(g, m); ok != want || err != nil {
		t.Fatalf("%s: RefundGrant(%+v, %d) = %v, %v; want %v", name, g, m, ok, err, want)
	}
}

// TestRefundGrows: refunds on a ring that must grow to take them (a
// refund is a claim) still land, exactly, and a key whose every grant is
// given back in part keeps a small ring.
func TestRefundGrows(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	p := mustParams(t, 100, time.Hour)
	l, m := New(p, 0), NewMutex(p, 0)
	for i := range int64(291) { // 97 units held at the end: below the limit
		now := i / 3 // three grants at each reading
		da, ga, _ := l.AllowGrant(now, 3)
		dm, gm, _ := m.AllowGrant(now, 3)
		if da != dm || ga != gm || !da.Allowed {
			t.Fatalf("grant %d: %+v %+v, mutex %+v %+v", i, da, ga, dm, gm)
		}
		back := 3 - i%3/2 // 3, 3, 2: one unit stays every third grant
		ra, _ := l.RefundGrant(ga, back)
		rm, _ := m.RefundGrant(gm, back)
		if !ra || !rm {
			t.Fatalf("refund %d: %v, mutex %v", i, ra, rm)
		}
		if pa, pm := mustPeek(l, now), mustPeek(m, now); pa != pm || pa.Remaining != 100-(i+1)/3-1 {
			t.Fatalf("after refund %d: %+v, mutex %+v", i, pa, pm)
		}
	}
	if c := l.ring.Load().capacity(); c > 512 {
		t.Fatalf("refunds left a ring of %d slots for 97 entries of cost", c)
	}
}

func mustPeek(s twin, now int64) Decision {
	d, _ := s.Peek(now)
	return d
}

// unsettle undoes the settling of the refund whose entry is the newest,
// as a refund's goroutine stalled between its claim and its settling
// would leave it.
func unsettle(t *testing.T, l *Log, refunded uint64) {
	t.Helper()
	v, _ := l.current()
	ts, m, ok := v.r.entryAt(v.h - 2)
	if !ok || m != v.prevCum || ts != v.prevTs {
		t.Fatalf("the entry before the newest is not a settled refund's")
	}
	if !cas128(v.r.slot(v.h-2), uint64(ts), metaOf(v.h-2, m), uint64(ts), metaOf(v.h-2, m+refunded)) {
		t.Fatal("unsettle: lost")
	}
	if v.settled() || !v.settled() {
		t.Fatal("settled did not find, and settle, the pair")
	}
	if !cas128(v.r.slot(v.h-2), uint64(ts), metaOf(v.h-2, m), uint64(ts), metaOf(v.h-2, m+refunded)) {
		t.Fatal("unsettle: lost")
	}
}

// TestRefundUnsettled: a refund whose goroutine stalls before settling
// the entry it refunded leaves a newest pair whose counts go down. Every
// reader answers as the mutex log does, every way of claiming after it
// (Take's claim, decide's, a charge, a grow) settles it first, and the
// pair never ends up inside the ring.
func TestRefundUnsettled(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	const T = 100
	p := mustParams(t, 20, T)
	claims := map[string]func(s debtor, now int64){
		"take":   func(s debtor, now int64) { s.Take(now, 1) },
		"allow":  func(s debtor, now int64) { s.AllowN(now, 1) },
		"charge": func(s debtor, now int64) { s.ChargeN(now, 2) },
		"grant":  func(s debtor, now int64) { s.AllowGrant(now, 1) },
		"grow": func(s debtor, now int64) {
			if l, ok := s.(*Log); ok {
				v, _ := l.current()
				l.seal(&v, kindGrow) // the copy takes the pair as it is
				if v, _ := l.current(); !below(v.prevCum, mustCum(t, v.r, v.h-2)) {
					t.Fatal("the copy settled the pair, or lost it")
				}
			}
			s.AllowN(now, 1)
		},
	}
	for name, claim := range claims {
		for _, refunded := range []int64{1, 4} { // in part, and the whole
			l, m := New(p, 0), NewMutex(p, 0)
			both := []debtor{l, m}
			for i, at := range []int64{0, 10, 20, 20} {
				for _, s := range both {
					s.AllowN(at, int64(i+1))
				}
			}
			var gs [2]Grant
			for i, s := range both {
				_, gs[i], _ = s.AllowGrant(30, 4)
			}
			for i, s := range both {
				if ok, _ := s.RefundGrant(gs[i], refunded); !ok {
					t.Fatalf("%s: refund lapsed", name)
				}
			}
			unsettle(t, l, uint64(refunded))
			for _, at := range []int64{30, 105, 115, 125} {
				if da, dm := mustPeek(l, at), mustPeek(m, at); da != dm {
					t.Fatalf("%s %d: Peek(%d) with an unsettled pair: %+v, mutex %+v", name, refunded, at, da, dm)
				}
				if at == 125 {
					continue // room for the whole limit: no denial to answer
				}
				if da, dm := l.decisionOf(at, 20), m.decisionOf(at, 20); da != dm {
					t.Fatalf("%s %d: a denial at %d with an unsettled pair: %+v, mutex %+v", name, refunded, at, da, dm)
				}
			}
			if ok, _ := l.RefundGrant(gs[0], 1); ok {
				t.Fatalf("%s: a refund matched an unsettled refund's entry", name)
			}
			claim(l, 40)
			claim(m, 40)
			v, _ := l.current()
			for j := v.lo + 1; j < v.h; j++ {
				_, c0, _ := v.r.entryAt(j - 1)
				_, c1, _ := v.r.entryAt(j)
				if below(c1, c0) {
					t.Fatalf("%s %d: entry %d counts %d after %d: an unsettled pair inside the ring", name, refunded, j, c1, c0)
				}
			}
			for _, at := range []int64{40, 105, 131, 141} {
				if da, dm := mustPeek(l, at), mustPeek(m, at); da != dm {
					t.Fatalf("%s %d: Peek(%d) after the claim: %+v, mutex %+v", name, refunded, at, da, dm)
				}
			}
			sa, oa := l.Evict(0)
			if sm, om := m.Evict(0); sa != sm || oa != om {
				t.Fatalf("%s %d: Evict: %d owing %d, mutex %d owing %d", name, refunded, sa, oa, sm, om)
			}
		}
	}
}

func mustCum(t *testing.T, r *logRing, j uint64) uint64 {
	t.Helper()
	_, c, ok := r.entryAt(j)
	if !ok {
		t.Fatalf("entry %d is gone", j)
	}
	return c
}

// decisionOf is what AllowN(now, n) would answer, without the claim (the
// answer a denial gets), read by the tests.
func (l *Log) decisionOf(now, n int64) Decision {
	for {
		v, _ := l.current()
		o, ok := l.evaluate(&v, now)
		if !ok {
			continue
		}
		if d, ok := l.decision(&v, o, now, n, false); ok {
			return d
		}
	}
}

// decisionOf is Log.decisionOf on the mutex log.
func (m *MutexLog) decisionOf(now, n int64) Decision {
	charged := max(now, m.newest)
	w, first := m.window(charged)
	return m.denial(now, n, w, first)
}

// model is the log's definition: the entries charged, each with its
// cost, and the refund rules, with no ring.
type model struct {
	p        Params
	entries  []logEntry
	newest   int64
	cum      uint64
	refunded bool
}

func (md *model) window(at int64) (w int64) {
	for _, e := range md.entries {
		if !md.p.expired(e.ts, at) {
			w += e.cost
		}
	}
	return w
}

func (md *model) add(at, n int64) {
	md.entries = append(md.entries, logEntry{at, n})
	md.newest, md.cum, md.refunded = at, md.cum+uint64(n), false
	for len(md.entries) > 1 && md.p.expired(md.entries[0].ts, at) {
		md.entries = md.entries[1:]
	}
}

func (md *model) give(m int64) {
	md.entries[len(md.entries)-1].cost -= m
	md.cum -= uint64(m)
	md.refunded = true
}

func (md *model) refundable(ts, cost int64) bool {
	k := len(md.entries) - 1
	return k >= 0 && !md.refunded && md.entries[k].ts == ts && md.entries[k].cost == cost
}

// TestLogDebtDifferential drives the lock-free log and its twin with the
// same random sequences of AllowN, Take, AllowGrant, Peek, ChargeN,
// Refund and RefundGrant, with debts up to the bound and past it,
// readings from the past, long jumps, idle retirement and scrambled
// hints, and requires the same answer at every step, and each answer to
// be the log's definition's (the model): an admission if and only if it
// fits beside the window, a charge if and only if it fits the bound,
// what is owed, a refund if and only if its entry is the newest.
func TestLogDebtDifferential(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	r := rand.New(rand.NewPCG(61, 62))
	steps := 20_000
	for _, rule := range []struct {
		limit  int64
		period time.Duration
	}{{1, 10}, {2, time.Second}, {3, 7}, {16, time.Millisecond}, {100, time.Second}, {5000, time.Millisecond}} {
		p := mustParams(t, rule.limit, rule.period)
		T, N, B := int64(rule.period), rule.limit, p.Bound()
		now := r.Int64N(1<<40) - 1<<39
		a, m := New(p, now), NewMutex(p, now)
		md := &model{p: p, newest: now}
		var grants []Grant
		var admitted, denied, charged, bounded, refunds, lapsed, maxOwed int64
		fail := func(i int, what string, args ...any) {
			t.Helper()
			t.Fatalf("%d per %v step %d at %d: "+what, append([]any{N, rule.period, i, now}, args...)...)
		}
		for i := range steps {
			switch op := r.IntN(100); {
			case op < 40:
				now += r.Int64N(T/N + 2)
			case op < 42:
				now += r.Int64N(3 * T)
			case op < 43:
				now += T << r.IntN(20) // far jumps
			case op < 47:
				now -= r.Int64N(T/2 + 1)
			}
			if i%97 == 0 {
				a.ring.Load().hint.Store(1)
				a.ring.Load().tail.Store(0)
				a.head.Store(guess(1, a.ring.Load().mask))
			}
			n := 1 + r.Int64N(min(N, 5))
			at := max(now, md.newest)
			w := md.window(at)
			switch r.IntN(20) {
			case 0, 1: // Peek
				da, la := a.Peek(now)
				dm, lm := m.Peek(now)
				if da != dm || !la || !lm {
					fail(i, "Peek: lock-free %+v, mutex %+v", da, dm)
				}
				if da.Owed != max(0, w-N) || da.Allowed != (w+1 <= N) {
					fail(i, "Peek %+v, the window holds %d", da, w)
				}
			case 2, 3, 4, 5: // ChargeN: small, large, to the bound and past it
				switch r.IntN(6) {
				case 0:
					n = 1 + r.Int64N(3*N)
				case 1:
					n = max(1, B-w+r.Int64N(3)-1)
				case 2:
					n = r.Int64N(3) - 1 // 0, −1: errors
				}
				da, la, ea := a.ChargeN(now, n)
				dm, lm, em := m.ChargeN(now, n)
				if da != dm || !la || !lm || (ea == nil) != (em == nil) || ea != nil && ea.Error() != em.Error() {
					fail(i, "ChargeN(%d): lock-free %+v %v, mutex %+v %v", n, da, ea, dm, em)
				}
				ok := n >= 1 && w+n <= B
				if (ea == nil) != ok || (n >= 1 && !ok) != errors.Is(ea, ErrDebtBound) {
					fail(i, "ChargeN(%d) beside %d, bound %d: %v", n, w, B, ea)
				}
				if !ok {
					if n >= 1 {
						bounded++
						if da.Owed != max(0, w-N) || da.Allowed {
							fail(i, "a refused charge answers %+v beside %d", da, w)
						}
					}
					continue
				}
				charged++
				if da.Owed != max(0, w+n-N) || da.Remaining != max(0, N-w-n) || !da.Allowed {
					fail(i, "charge of %d beside %d: %+v", n, w, da)
				}
				md.add(at, n)
				maxOwed = max(maxOwed, da.Owed)
			case 6: // Refund, of the newest grant's cost or another
				if r.IntN(2) == 0 && len(md.entries) > 0 {
					n = md.entries[len(md.entries)-1].cost
				}
				ok := n >= 1 && md.refundable(now, n)
				a.Refund(now, n)
				m.Refund(now, n)
				if ok {
					md.give(n)
				}
				if da, dm := mustPeek(a, now), mustPeek(m, now); da != dm {
					fail(i, "after Refund(%d): lock-free %+v, mutex %+v", n, da, dm)
				}
			case 7, 8: // RefundGrant of a recent grant
				if len(grants) == 0 {
					continue
				}
				g := grants[len(grants)-1-r.IntN(min(len(grants), 3))]
				back := 1 + r.Int64N(g.Cost())
				k := len(md.entries) - 1
				ok := md.refundable(g.ts, g.cost) && md.cum&cumMask == g.cum && k >= 0
				if r.IntN(2) == 0 {
					ra, ea := a.RefundGrant(g, back)
					rm, em := m.RefundGrant(g, back)
					if ra != rm || ea != nil || em != nil || ra != ok {
						fail(i, "RefundGrant(%+v, %d): lock-free %v %v, mutex %v %v, model %v", g, back, ra, ea, rm, em, ok)
					}
				} else {
					// SettleGrant: the lock-free log answers from its
					// refund's claim when the refund lands (and with one
					// goroutine it always can), as a Peek after it would;
					// the mutex answers always.
					da, aa, ea := a.SettleGrant(g, back, now)
					dm, am, em := m.SettleGrant(g, back, now)
					if ea != nil || em != nil || aa != ok || !am || (aa && da != dm) {
						fail(i, "SettleGrant(%+v, %d): lock-free %+v %v %v, mutex %+v %v %v, model %v", g, back, da, aa, ea, dm, am, em, ok)
					}
					if pa := mustPeek(a, now); aa && pa != da {
						fail(i, "SettleGrant(%+v, %d) answered %+v, a Peek after it %+v", g, back, da, pa)
					}
				}
				if ok {
					md.give(back)
					refunds++
				} else {
					lapsed++
				}
			case 9: // RetireIdle
				ia, im := a.RetireIdle(now), m.RetireIdle(now)
				if ia != im || ia != (w == 0 && md.newest <= now && md.window(now) == 0) {
					fail(i, "RetireIdle: lock-free %v, mutex %v, window %d", ia, im, w)
				}
				if ia {
					a, m = a.Successor(now), m.Successor(now)
					*md = model{p: p, newest: now}
				}
			default: // AllowN, Take, AllowGrant
				if r.IntN(30) == 0 {
					n = N + 1 - r.Int64N(2)
				}
				fits := n <= N && w+n <= N
				var da, dm Decision
				var ga, gm Grant
				switch r.IntN(3) {
				case 0:
					da, _ = a.AllowN(now, n)
					dm, _ = m.AllowN(now, n)
				case 1:
					ok, _ := a.Take(now, n)
					dm, _ = m.AllowN(now, n)
					da = dm
					if ok != dm.Allowed {
						fail(i, "Take(%d) = %v, mutex %+v", n, ok, dm)
					}
				case 2:
					da, ga, _ = a.AllowGrant(now, n)
					dm, gm, _ = m.AllowGrant(now, n)
					if da.Allowed {
						grants = append(grants, ga)
					}
				}
				if da != dm || ga != gm {
					fail(i, "AllowN(%d): lock-free %+v %+v, mutex %+v %+v", n, da, ga, dm, gm)
				}
				if da.Allowed != fits || da.Owed != max(0, w-N) {
					fail(i, "AllowN(%d) beside %d: %+v", n, w, da)
				}
				if fits {
					admitted++
					md.add(at, n)
				} else {
					denied++
				}
			}
		}
		if c := a.ring.Load().capacity(); c > ringCap(p) {
			t.Errorf("%d per %v: a ring of %d, above the %d the bound allows", N, rule.period, c, ringCap(p))
		}
		t.Logf("%d per %v: %d admitted, %d denied, %d charged, %d past the bound, %d refunded, %d lapsed, most owed %d",
			N, rule.period, admitted, denied, charged, bounded, refunds, lapsed, maxOwed)
		if admitted < 100 || denied < 100 || charged < 100 || bounded < 10 || refunds < 10 || lapsed < 10 || maxOwed < B/2 {
			t.Errorf("%d per %v: not every path exercised", N, rule.period)
		}
	}
}

// TestLogChargeConcurrent: 64 goroutines on 8 Ps charge, ask for grants
// and give some back in part, on one log, at a frozen instant, so that
// nothing ages out. At the end the window holds exactly what was charged
// and admitted less what the refunds that landed gave back; no grant was
// made while the key owed: each grant's cumulative cost, all that landed
// before it and itself, is at most N; and a charge past the bound took
// nothing. Run it with -tags chaos too, which yields before every CAS.
func TestLogChargeConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const N, now = 1000, 42
	p := mustParams(t, N, time.Second)
	for _, mk := range debtMakers(t) {
		before := map[string]int64{}
		for _, site := range []string{"log.step", "log.refund", "log.settle"} {
			before[site] = chaos.RetriesAt(site)
		}
		s := mk.new(p, now)
		var took, gaveBack, refused, inDebt atomic.Int64
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 7))
				<-start
				for i := range 150 {
					switch op := r.IntN(6); {
					case op < 2 && i >= 30: // grants only, to begin with
						n := 1 + r.Int64N(10)
						var ok bool
						if op == 0 {
							ok, _ = s.Take(now, n)
						} else {
							d, _ := s.AllowN(now, n)
							ok = d.Allowed
						}
						if ok {
							took.Add(n)
						}
					case op < 4 && i >= 30:
						n := 1 + r.Int64N(20)
						if r.IntN(50) == 0 {
							n = 2_000 + r.Int64N(5_000)
						}
						d, _, err := s.ChargeN(now, n)
						switch {
						case errors.Is(err, ErrDebtBound):
							refused.Add(1)
						case err != nil || !d.Allowed:
							t.Errorf("charge of %d: %+v %v", n, d, err)
							return
						default:
							took.Add(n)
						}
					default:
						n := 1 + r.Int64N(10)
						d, gr, _ := s.AllowGrant(now, n)
						if !d.Allowed {
							if d.Owed > 0 {
								inDebt.Add(1)
							}
							continue
						}
						if gr.cum > N || int64(gr.cum) < n {
							t.Errorf("a grant of %d with %d landed before and with it: admitted while owing", n, gr.cum)
							return
						}
						took.Add(n)
						if r.IntN(2) == 0 {
							back := 1 + r.Int64N(n)
							if ok, err := s.RefundGrant(gr, back); err != nil {
								t.Error(err)
								return
							} else if ok {
								gaveBack.Add(back)
							}
						}
					}
				}
			}()
		}
		close(start)
		wg.Wait()
		if l, ok := s.(*Log); ok {
			// Counts go down only from a refunded entry to its refund's,
			// and only at the newest pair: never inside the ring, where
			// the searches take them as non-decreasing.
			v, _ := l.current()
			for j := v.lo + 1; j+1 < v.h; j++ {
				if below(mustCum(t, v.r, j), mustCum(t, v.r, j-1)) {
					t.Errorf("entry %d of %d counts below the one before it: an unsettled refund inside the ring", j, v.h)
				}
			}
		}
		d, _ := s.Peek(now)
		if w := held(d); w != took.Load()-gaveBack.Load() {
			t.Errorf("%s: the window holds %d; charged and admitted %d, given back %d", mk.name, w, took.Load(), gaveBack.Load())
		}
		if inDebt.Load() == 0 || refused.Load() == 0 || gaveBack.Load() == 0 {
			t.Errorf("%s: %d denials in debt, %d charges past the bound, %d given back: not exercised", mk.name, inDebt.Load(), refused.Load(), gaveBack.Load())
		}
		var sites []string
		for _, site := range []string{"log.step", "log.refund", "log.settle"} {
			sites = append(sites, site+" "+strconv.FormatInt(chaos.RetriesAt(site)-before[site], 10))
		}
		if mk.name == "lockfree" && chaos.Enabled && chaos.RetriesAt("log.step") == before["log.step"] {
			t.Errorf("no claim lost its CAS under -tags chaos: the test proved nothing")
		}
		t.Logf("%s: took %d, gave back %d, %d past the bound, %d refused in debt; %s (counted with -tags chaos)",
			mk.name, took.Load(), gaveBack.Load(), refused.Load(), inDebt.Load(), strings.Join(sites, ", "))
	}
}

// TestMoveOnRefund: a claim that lost its slot to a refund's entry does
// not carry on past it (it would leave the refunded entry unsettled
// inside the ring): it reads the log again, and settles the pair first.
func TestMoveOnRefund(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	p := mustParams(t, 20, 100)
	l := New(p, 0)
	for range 8 { // a ring of 16, with room left once these have aged out
		l.AllowN(0, 1)
	}
	l.AllowN(200, 2)
	_, g, _ := l.AllowGrant(210, 3)
	lost, _ := l.current() // a claimant's view: the grant is the newest
	if ok, _ := l.RefundGrant(g, 2); !ok {
		t.Fatal("refund lapsed")
	}
	unsettle(t, l, 2)
	if lost.moveOn(0) {
		t.Fatal("a claim carried on past a refund's entry")
	}
	won, _ := l.current() // a claimant's view after another grant's
	l.AllowN(220, 1)
	if l.ring.Load() != won.r {
		t.Fatal("the ring was copied: the test needs one with room")
	}
	if !won.moveOn(0) {
		t.Fatal("a claim that lost to a grant did not carry on")
	}
}

// TestTakeWideRing: on a ring of more than takeRing entries, what the
// entries between the oldest and the newest cost can pass 2^38, where
// cumulative counts wrap, so Take's one-entry bound cannot be trusted:
// here the ring's 2^18 − 2 charges sum to exactly 2^38, which wraps to 0,
// while the window holds one charge far above the limit. Take must
// refuse, as decide does.
func TestTakeWideRing(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	const c = 1 << 20
	p := mustParams(t, 1<<16, 1)
	r := newRing(1 << 18)
	h := r.capacity() + 5
	cum := uint64(0)
	for j := h - r.capacity(); j < h; j++ {
		cost := uint64(c)
		if j == h-1 {
			cost = 3 * c // the window's: (2^18 − 3)·2^20 + 3·2^20 = 2^38
		}
		cum += cost
		r.slot(j).ts.Store(j)
		r.slot(j).meta.Store(metaOf(j, cum))
	}
	if 3*c > p.Bound() {
		t.Fatal("the charges are past the bound")
	}
	l := &Log{p: p}
	r.hint.Store(h)
	l.head.Store(guess(h, r.mask))
	l.ring.Store(r)
	now := int64(h - 1)
	if d, _ := l.Peek(now); d.Allowed || d.Owed != 3*c-1<<16 {
		t.Fatalf("the window holds one charge of %d: %+v", 3*c, d)
	}
	if ok, _ := l.Take(now, 1); ok {
		t.Fatal("Take admitted beside a window far past the limit: its bound wrapped")
	}
}

// TestConvertDebt: a rule change carries a key's debt to the new rule,
// exactly when the new bound can hold it, else up to that bound; both
// logs alike.
func TestConvertDebt(t *testing.T) {
	p := mustParams(t, 100, time.Second)
	for _, c := range []struct {
		limit int64
		owed  int64
	}{{1000, 24_900}, {10, 2_550}, {100, 24_900}} {
		q := mustParams(t, c.limit, time.Minute)
		var got []Decision
		for _, m := range debtMakers(t) {
			s := m.new(p, 0)
			s.ChargeN(0, 25_000) // owes 24,900
			var conv twin
			switch s := s.(type) {
			case *Log:
				conv = s.ConvertTo(5, q)
			case *MutexLog:
				conv = s.ConvertTo(5, q)
			}
			d := mustPeek(conv, 5)
			if d.Owed != c.owed || d.Allowed || d.RetryAfter != time.Minute {
				t.Errorf("%s: converted to %d a minute, the key answers %+v, want Owed %d", m.name, c.limit, d, c.owed)
			}
			got = append(got, d)
		}
		if len(got) == 2 && got[0] != got[1] {
			t.Errorf("converted to %d: mutex %+v, lock-free %+v", c.limit, got[0], got[1])
		}
	}
}
