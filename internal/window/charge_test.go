package window

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/floodgate-go/floodgate/internal/word"
)

// charger is what the tests of charges ask of each form of a window: the
// lock-free Window, MutexWindow, and a word inline in a table. Each form
// follows its own retirements (successors, rebases), so that a test sees
// one key; moved is the latest reading at which it did.
type charger interface {
	AllowN(now, n int64) (Decision, bool)
	Take(now, n int64) (bool, bool)
	Peek(now int64) (Decision, bool)
	Refund(now, n int64) bool
	ChargeN(now, n int64) (Decision, bool, error)
	moved() int64
}

type succeeding[S any] interface {
	AllowN(now, n int64) (Decision, bool)
	Take(now, n int64) (bool, bool)
	Peek(now int64) (Decision, bool)
	Refund(now, n int64) bool
	ChargeN(now, n int64) (Decision, bool, error)
	Successor(now int64) S
}

// follow is a Window or MutexWindow that moves on to its successor when
// it retires, as the root package does.
type follow[S succeeding[S]] struct {
	s    S
	last int64
}

func (f *follow[S]) next(now int64) { f.s, f.last = f.s.Successor(now), now }
func (f *follow[S]) moved() int64   { return f.last }

func (f *follow[S]) AllowN(now, n int64) (Decision, bool) {
	for {
		if d, live := f.s.AllowN(now, n); live {
			return d, true
		}
		f.next(now)
	}
}

func (f *follow[S]) Take(now, n int64) (bool, bool) {
	for {
		if ok, live := f.s.Take(now, n); live {
			return ok, true
		}
		f.next(now)
	}
}

func (f *follow[S]) Peek(now int64) (Decision, bool) {
	for {
		if d, live := f.s.Peek(now); live {
			return d, true
		}
		f.next(now)
	}
}

func (f *follow[S]) Refund(now, n int64) bool {
	for !f.s.Refund(now, n) {
		f.next(now)
	}
	return true
}

func (f *follow[S]) ChargeN(now, n int64) (Decision, bool, error) {
	for {
		if d, live, err := f.s.ChargeN(now, n); live {
			return d, true, err
		}
		f.next(now)
	}
}

// inline is a window word held as a table holds it, with the table's
// origin, moved forward (RebaseWord) when a reading lies past its range.
type inline struct {
	p      Params
	w      atomic.Uint64
	origin int64
	last   int64
}

func newInline(p Params, now int64) *inline {
	return &inline{p: p, origin: p.Origin(now), last: math.MinInt64} // word 0: closed before now's window
}

func (s *inline) moved() int64 { return s.last }

func (s *inline) rebase(now int64) {
	to := s.p.Origin(now)
	s.w.Store(s.p.RebaseWord(s.w.Load(), s.origin, to))
	s.origin, s.last = to, now
}

func (s *inline) AllowN(now, n int64) (Decision, bool) {
	for {
		d, st := s.p.AllowWord(&s.w, s.origin, now, n)
		if st != word.Rebase {
			return d, st == word.Live
		}
		s.rebase(now)
	}
}

func (s *inline) Take(now, n int64) (bool, bool) {
	for {
		ok, st := s.p.TakeWord(&s.w, s.origin, now, n)
		if st != word.Rebase {
			return ok, st == word.Live
		}
		s.rebase(now)
	}
}

func (s *inline) Peek(now int64) (Decision, bool) {
	return s.p.PeekValue(s.w.Load(), s.origin, now), true
}

func (s *inline) Refund(now, n int64) bool {
	return s.p.RefundWord(&s.w, s.origin, now, n) == word.Live
}

func (s *inline) ChargeN(now, n int64) (Decision, bool, error) {
	for {
		d, st, err := s.p.ChargeWord(&s.w, s.origin, now, n)
		if st != word.Rebase {
			return d, st == word.Live, err
		}
		s.rebase(now)
	}
}

var chargeForms = []struct {
	name string
	new  func(p Params, now int64) charger
}{
	{"lockfree", func(p Params, now int64) charger { return &follow[*Window]{s: New(p, now), last: math.MinInt64} }},
	{"mutex", func(p Params, now int64) charger {
		return &follow[*MutexWindow]{s: NewMutex(p, now), last: math.MinInt64}
	}},
	{"word", func(p Params, now int64) charger { return newInline(p, now) }},
}

// maxLimit is the largest limit NewParams accepts for kind.
func maxLimit(kind Kind) int64 {
	if kind == Sliding {
		return 1<<23 - 2
	}
	return 1<<47 - 2
}

// owe is d with Owed set, for tables.
func owe(d Decision, owed int64) Decision {
	d.Owed = owed
	return d
}

// sameErr reports whether two charges failed alike.
func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Error() == b.Error() && errors.Is(a, ErrDebtBound) == errors.Is(b, ErrDebtBound)
}

// TestCountLayout checks the layout rule at every width of limit: the
// index keeps 16 bits or more, and 24 or more while the limit leaves
// four times itself beside them; a count holds 256 times the limit, or
// four times, where the rule says; and no count reaches its field's
// all-ones, so that a retired word never reads as a reset.
func TestCountLayout(t *testing.T) {
	for _, k := range kinds {
		wide, quad := int64(1)<<31, int64(1)<<45 // N+1 below: 256×, and 4×
		wideIndex := int64(1) << 37              // N+1 below: 24 bits of index
		if k.kind == Sliding {
			wide, quad, wideIndex = 1<<11, 1<<21, 1<<17
		}
		for b := 2; ; b++ {
			lo := int64(1)<<(b-1) - 1 // the smallest and largest N with bits.Len(N+1) = b
			hi := min(int64(1)<<b-2, maxLimit(k.kind))
			if lo > hi {
				break
			}
			for _, n := range []int64{max(lo, 1), hi} {
				p := mustParams(t, k.kind, n, time.Second)
				mc, idx := p.MaxCount(), 63-int64(p.cb)
				switch {
				case idx < minRelBits:
					t.Errorf("%s N=%d: %d bits of index", k.name, n, idx)
				case n+1 < wideIndex && idx < wideRelBits:
					t.Errorf("%s N=%d: %d bits of index, want 24 or more", k.name, n, idx)
				case mc < n:
					t.Errorf("%s N=%d: MaxCount %d below the limit", k.name, n, mc)
				case n+1 < wide && mc < 256*(n+2)-2:
					t.Errorf("%s N=%d: MaxCount %d, want 256·(N+2) − 2 or more", k.name, n, mc)
				case n+1 < quad && mc < 4*(n+2)-2:
					t.Errorf("%s N=%d: MaxCount %d, want 4·(N+2) − 2 or more", k.name, n, mc)
				case mc != 1<<p.c-2:
					t.Errorf("%s N=%d: MaxCount %d is not 2^c − 2", k.name, n, mc)
				}
				prev := int64(0)
				if k.kind == Sliding {
					prev = mc
				}
				for _, rel := range []int64{-p.maxRel, p.maxRel} {
					w := p.pack(rel, mc, prev)
					if r, c, pv := p.unpack(w); r != rel || c != mc || pv != prev {
						t.Fatalf("%s N=%d: pack(%d, %d, %d) unpacked as (%d, %d, %d)", k.name, n, rel, mc, prev, r, c, pv)
					}
					if w|retiredBit == resetWord || word.IsMark(w) {
						t.Fatalf("%s N=%d: a full word reads as a reset or a mark", k.name, n)
					}
				}
			}
		}
	}
	for _, c := range []struct {
		kind  Kind
		limit int64
		want  int64
	}{
		{Fixed, 1, 1022}, {Sliding, 1, 1022}, {Fixed, 1000, 262_142}, {Sliding, 1000, 262_142},
		{Fixed, 1_000_000, 268_435_454}, {Sliding, 1_000_000, 4_194_302},
		{Fixed, 1<<47 - 2, 1<<47 - 2}, {Sliding, 1<<23 - 2, 1<<23 - 2},
	} {
		if p := mustParams(t, c.kind, c.limit, time.Minute); p.MaxCount() != c.want {
			t.Errorf("kind %d N=%d: MaxCount %d, want %d", c.kind, c.limit, p.MaxCount(), c.want)
		}
	}
}

// chargeStep is one step of a table: an operation at an instant, and the
// answer it must give (a Peek's for "refund").
type chargeStep struct {
	op   string // allow, charge, peek, refund
	at   int64
	n    int64
	want Decision
	err  string // "", "bound" or "cost"
}

func runChargeTable(t *testing.T, name string, p Params, steps []chargeStep) {
	t.Helper()
	for _, f := range chargeForms {
		s := f.new(p, 0)
		for i, st := range steps {
			var got Decision
			var err error
			switch st.op {
			case "allow":
				got, _ = s.AllowN(st.at, st.n)
			case "charge":
				got, _, err = s.ChargeN(st.at, st.n)
			case "peek":
				got, _ = s.Peek(st.at)
			case "refund":
				s.Refund(st.at, st.n)
				got, _ = s.Peek(st.at)
			}
			switch {
			case st.err == "" && err != nil:
				t.Errorf("%s %s step %d (%s %d at %d): %v", name, f.name, i, st.op, st.n, st.at, err)
			case st.err == "bound" && !errors.Is(err, ErrDebtBound):
				t.Errorf("%s %s step %d: err %v, want ErrDebtBound", name, f.name, i, err)
			case st.err == "bound" && !strings.Contains(err.Error(), strconv.FormatInt(p.MaxCount(), 10)):
				t.Errorf("%s %s step %d: %q does not name the bound %d", name, f.name, i, err, p.MaxCount())
			case st.err == "cost" && (err == nil || errors.Is(err, ErrDebtBound)):
				t.Errorf("%s %s step %d: err %v, want a cost error", name, f.name, i, err)
			case st.err != "cost" && got != st.want:
				t.Errorf("%s %s step %d (%s %d at %d): got %+v, want %+v", name, f.name, i, st.op, st.n, st.at, got, st.want)
			}
		}
	}
}

// TestChargeFixed: a budget of 1,000 an hour takes a charge of 600 when
// 900 are used, refuses everything while it owes, and starts the next
// window at 0; refunds in debt are exact; the bound charges nothing.
func TestChargeFixed(t *testing.T) {
	const T = int64(time.Hour)
	p := mustParams(t, Fixed, 1000, time.Hour)
	mc := p.MaxCount()
	h := time.Duration(T / 2)
	runChargeTable(t, "fixed", p, []chargeStep{
		{"allow", 0, 900, dec(true, 1000, 100, 0, time.Hour), ""},
		{"charge", T / 2, 600, owe(dec(true, 1000, 0, h, h), 500), ""},
		{"allow", T / 2, 1, owe(dec(false, 1000, 0, h, h), 500), ""},
		{"peek", T - 1, 0, owe(dec(false, 1000, 0, 1, 1), 500), ""},
		{"refund", T / 2, 200, owe(dec(false, 1000, 0, h, h), 300), ""},
		{"charge", T / 2, mc - 1300 + 1, owe(dec(false, 1000, 0, h, h), 300), "bound"},
		{"peek", T / 2, 0, owe(dec(false, 1000, 0, h, h), 300), ""},
		{"charge", T / 2, 0, Decision{}, "cost"},
		{"charge", T / 2, -5, Decision{}, "cost"},
		{"charge", T / 2, math.MinInt64, Decision{}, "cost"},
		{"charge", T / 2, math.MaxInt64, owe(dec(false, 1000, 0, h, h), 300), "bound"},
		{"charge", T / 2, mc - 1300, owe(dec(true, 1000, 0, h, h), mc-1000), ""},
		{"charge", T / 2, 1, owe(dec(false, 1000, 0, h, h), mc-1000), "bound"},
		{"refund", T / 2, mc - 999, dec(true, 1000, 0, 0, h), ""}, // exact: 999 left
		{"charge", T / 2, mc - 999, owe(dec(true, 1000, 0, h, h), mc-1000), ""},
		// Paid at the window's end: the next one starts at 0.
		{"allow", T, 1000, dec(true, 1000, 0, 0, time.Hour), ""},
		{"charge", T + 1, 1, owe(dec(true, 1000, 0, time.Hour-1, time.Hour-1), 1), ""},
		// A reading from window 0, after window 1 was written: the charge
		// lands in window 1, and a refund at that reading finds nothing.
		{"charge", T - 10, 5, owe(dec(true, 1000, 0, time.Hour+10, time.Hour+10), 6), ""},
		{"refund", T - 10, 5, owe(dec(false, 1000, 0, time.Hour+10, time.Hour+10), 6), ""},
		{"refund", T + 1, 7, dec(true, 1000, 0, 0, time.Hour-1), ""},
	})
}

// TestChargeSliding: the debt ages out as the window slides. With 1,000
// per 3,000ns, a charge of 1,500 owes 500 until, in the next window, the
// previous count weighs 999: at 1,002ns into it.
func TestChargeSliding(t *testing.T) {
	const T = 3000
	p := mustParams(t, Sliding, 1000, T)
	mc := p.MaxCount()
	runChargeTable(t, "sliding", p, []chargeStep{
		{"charge", 0, 1500, owe(dec(true, 1000, 0, 4002, 6000), 500), ""},
		{"allow", 0, 1, owe(dec(false, 1000, 0, 4002, 6000), 500), ""},
		{"peek", T, 0, owe(dec(false, 1000, 0, 1002, T), 500), ""},
		{"peek", T + 999, 0, owe(dec(false, 1000, 0, 3, 2001), 1), ""}, // ceil(1500 × 2001 / 3000) = 1001
		{"peek", T + 1000, 0, dec(false, 1000, 0, 2, 2000), ""},
		{"allow", T + 1001, 1, dec(false, 1000, 0, 1, 1999), ""},
		{"allow", T + 1002, 1, dec(true, 1000, 0, 0, 4998), ""},
		// A count far above N: the wait runs into the next window, where
		// 5,001 in window 1 lets a request of 1 fit once 5001 × (3000 − e)
		// ≤ 999 × 3000, at e = 3000 − floor(999 × 3000 / 5001) = 2401.
		{"charge", T + 1002, 5000, owe(dec(true, 1000, 0, 1998+2401, 4998), 5000), ""},
		{"peek", 2 * T, 0, owe(dec(false, 1000, 0, 2401, T), 4001), ""},
		{"refund", T + 1002, 1, owe(dec(false, 1000, 0, 1998+2401, 4998), 4999), ""},
		{"peek", 2 * T, 0, owe(dec(false, 1000, 0, 2401, T), 4000), ""},
		// In window 2, the count of 5,000 is prev; a charge into window 2
		// may take its own count to the bound, whatever prev holds.
		{"charge", 2 * T, mc + 1, owe(dec(false, 1000, 0, 2401, T), 4000), "bound"},
		// 999 × 3000 / 262,142 = 11.4: a request fits 2,989 into window 3.
		{"charge", 2 * T, mc, owe(dec(true, 1000, 0, T+2989, 2*T), mc+4000), ""},
		// ceil(5000 × 2995 / 3000) = 4992.
		{"charge", 2*T + 5, 1, owe(dec(false, 1000, 0, T-5+2989, 2*T-5), mc+3992), "bound"},
		{"charge", 2 * T, 0, Decision{}, "cost"},
		// Two windows on, both counts are gone.
		{"allow", 4 * T, 1000, dec(true, 1000, 0, 0, 2*T), ""},
	})
}

// TestChargeExtremes: the smallest limit and the largest of each kind.
func TestChargeExtremes(t *testing.T) {
	for _, k := range kinds {
		for _, n := range []int64{1, 1 << 46, maxLimit(k.kind)} {
			if n > maxLimit(k.kind) {
				continue
			}
			p := mustParams(t, k.kind, n, time.Second)
			mc := p.MaxCount()
			for _, f := range chargeForms {
				name := k.name + " " + strconv.FormatInt(n, 10) + " " + f.name
				s := f.new(p, 0)
				d, _, err := s.ChargeN(0, mc)
				if err != nil || !d.Allowed || d.Owed != mc-n || d.Remaining != 0 {
					t.Fatalf("%s: a charge of the bound %d: %+v, %v", name, mc, d, err)
				}
				before, _ := s.Peek(0)
				if d, _, err := s.ChargeN(0, 1); !errors.Is(err, ErrDebtBound) || d.Allowed {
					t.Fatalf("%s: a charge past the bound: %+v, %v", name, d, err)
				}
				if after, _ := s.Peek(0); after != before {
					t.Fatalf("%s: a refused charge changed the state: %+v, then %+v", name, before, after)
				}
				if d, _ := s.AllowN(int64(time.Second)-1, 1); d.Allowed {
					t.Fatalf("%s: admitted in debt: %+v", name, d)
				}
				back := int64(time.Second) // fixed: paid at the window's end
				if k.kind == Sliding {
					back = 2 * back // sliding: gone at the end of the next window
				}
				if d, _ := s.AllowN(back, n); !d.Allowed || d.Owed != 0 {
					t.Fatalf("%s: not back to full at %d: %+v", name, back, d)
				}
			}
		}
	}
}

// TestChargeAgainstModel drives each form and the plain model (a count
// per window) with random non-decreasing times, and every answer must be
// equal: admissions, charges into debt and up to the bound, refunds,
// peeks, and far jumps that move the origin.
func TestChargeAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 52))
	rules := []struct {
		kind   Kind
		limit  int64
		period time.Duration
	}{
		{Fixed, 1, time.Second}, {Sliding, 1, time.Second}, {Fixed, 5, time.Second}, {Sliding, 5, time.Second},
		{Fixed, 7, 3 * time.Millisecond}, {Sliding, 7, 3 * time.Millisecond}, {Fixed, 1000, time.Hour},
		{Sliding, 1000, time.Hour}, {Fixed, 3, 7}, {Sliding, 3, 7},
		{Fixed, 1<<47 - 2, time.Second}, {Sliding, 1<<23 - 2, time.Second}, {Sliding, 1_000_000, time.Millisecond},
	}
	steps := 1000
	if testmain.Quick() {
		steps = 300 // the model's big.Rat searches are slow under the race detector
	}
	for _, rule := range rules {
		p := mustParams(t, rule.kind, rule.limit, rule.period)
		T, mc := int64(rule.period), p.MaxCount()
		for _, f := range chargeForms {
			now := r.Int64N(1<<40) - 1<<39
			s := f.new(p, now)
			ref := newModel(rule.kind, rule.limit, rule.period)
			var owing, bound, admitted int
			for i := range steps {
				switch op := r.IntN(60); {
				case op < 30:
					now += r.Int64N(T/rule.limit + 1)
				case op < 34:
					now += r.Int64N(3 * T)
				case op == 34 && now < 1<<61:
					now += r.Int64N(1<<16) * T // past a narrow index's range
				}
				k, _ := floorDivMod(now, T)
				var got, want Decision
				var err error
				var n int64
				switch op := r.IntN(10); {
				case op < 4:
					n = 1 + r.Int64N(min(3, rule.limit))
					got, _ = s.AllowN(now, n)
					want = ref.allowN(now, n)
				case op < 5:
					got, _ = s.Peek(now)
					want = ref.allowN(now, 1)
					if want.Allowed {
						ref.counts[k]--
					}
				default:
					switch r.IntN(4) {
					case 0:
						n = 1 + r.Int64N(3)
					case 1:
						n = 1 + r.Int64N(2*rule.limit)
					case 2:
						n = 1 + r.Int64N(max(1, mc/8))
					default:
						n = max(1, mc-ref.counts[k]+r.Int64N(3)-1) // at the bound
					}
					got, _, err = s.ChargeN(now, n)
					var ok bool
					want, ok = ref.chargeN(now, n, mc)
					if ok != (err == nil) || !ok && !errors.Is(err, ErrDebtBound) {
						t.Fatalf("%s %d per %v %s step %d: ChargeN(%d, %d) err %v, model ok %v", kindName(rule.kind), rule.limit, rule.period, f.name, i, now, n, err, ok)
					}
					if !ok {
						bound++
					}
				}
				if got != want {
					t.Fatalf("%s %d per %v %s step %d at %d (n=%d): got %+v, want %+v", kindName(rule.kind), rule.limit, rule.period, f.name, i, now, n, got, want)
				}
				if got.Owed > 0 {
					owing++
				}
				if got.Allowed && n > 0 {
					admitted++
					if r.IntN(4) == 0 { // a settle: give back some, all, or more
						back := 1 + r.Int64N(n+1)
						s.Refund(now, back)
						ref.counts[k] = max(0, ref.counts[k]-back)
					}
				}
			}
			if owing < steps/20 && mc > rule.limit || bound < steps/100 || admitted < steps/20 {
				t.Errorf("%s %d per %v %s: %d answers owing, %d charges past the bound, %d granted: not exercised",
					kindName(rule.kind), rule.limit, rule.period, f.name, owing, bound, admitted)
			}
		}
	}
}

func kindName(k Kind) string {
	if k == Sliding {
		return "sliding"
	}
	return "fixed"
}

// chargeN is ChargeN in the model: n into the window of now, unless it
// would take that window's count past maxCount.
func (m *model) chargeN(now, n, maxCount int64) (Decision, bool) {
	k, _ := floorDivMod(now, m.period)
	ok := n <= maxCount-m.counts[k]
	if ok {
		m.counts[k] += n
		m.last = max(m.last, k)
	}
	d := Decision{Allowed: ok, Limit: m.limit, Remaining: m.remaining(now), Owed: m.owed(now)}
	if !m.fits(now, 1) {
		d.RetryAfter = m.search(now, func(t int64) bool { return m.fits(t, 1) })
	}
	d.ResetAfter = m.search(now, func(t int64) bool { return m.remaining(t) == m.limit })
	return d, ok
}

// runCharges applies one operation per byte of ops to the three forms of
// one window, and fails at the first answer on which they differ. The
// clock moves forward near and far (rebases, successors) and back, but
// never before the latest reading at which a form moved: there the forms
// differ by design (a Window retired with nothing to carry is closed
// before that reading's window; a rebased word, only before its range).
func runCharges(t *testing.T, p Params, now int64, ops []byte) (owing, bound int) {
	t.Helper()
	forms := make([]charger, len(chargeForms))
	for i, f := range chargeForms {
		forms[i] = f.new(p, now)
	}
	T, limit, mc := p.period, p.limit, p.MaxCount()
	step := max(1, T/limit)
	floor := now - 3*T
	for i, b := range ops {
		op, arg := b%10, int64(b/10)
		var ds [3]Decision
		var errs [3]error
		var oks [3]bool
		name := ""
		switch op {
		case 0, 1:
			n := arg % (limit + 2)
			name = "AllowN"
			for j, s := range forms {
				ds[j], _ = s.AllowN(now, n)
			}
		case 2:
			n := arg % (limit + 2)
			name = "Take"
			for j, s := range forms {
				oks[j], _ = s.Take(now, n)
			}
		case 3:
			n := arg - 1 // −1 and 0 are errors
			name = "ChargeN"
			for j, s := range forms {
				ds[j], _, errs[j] = s.ChargeN(now, n)
			}
		case 4:
			d, _ := forms[1].Peek(now)
			est := d.Limit - d.Remaining + d.Owed
			n := max(1, mc-est+arg%3-1) // at the bound, or one off
			if arg >= 15 {
				n = max(1, mc>>(arg%8))
			}
			name = "ChargeN(big)"
			for j, s := range forms {
				ds[j], _, errs[j] = s.ChargeN(now, n)
			}
		case 5:
			name = "Refund"
			n := arg % (limit + 2)
			if arg >= 20 {
				n = mc >> (arg % 5)
			}
			for _, s := range forms {
				s.Refund(now, n)
			}
		case 6:
			now += arg * step / 2
		case 7:
			now = max(floor, now-arg*step/3)
		case 8:
			if now < 1<<61 {
				now += arg * T << (arg % 20)
			}
		case 9:
			now += T * (arg % 3)
		}
		for j := range forms[1:] {
			if ds[j+1] != ds[0] || oks[j+1] != oks[0] || !sameErr(errs[j+1], errs[0]) {
				t.Fatalf("op %d %s at %d: %s %+v %v %v, %s %+v %v %v", i, name, now,
					chargeForms[0].name, ds[0], oks[0], errs[0], chargeForms[j+1].name, ds[j+1], oks[j+1], errs[j+1])
			}
		}
		if errs[0] != nil && errors.Is(errs[0], ErrDebtBound) {
			bound++
		}
		var peeks [3]Decision
		for j, s := range forms {
			peeks[j], _ = s.Peek(now)
			floor = max(floor, s.moved())
		}
		if peeks[1] != peeks[0] || peeks[2] != peeks[0] {
			t.Fatalf("op %d at %d: Peek %+v, %+v, %+v", i, now, peeks[0], peeks[1], peeks[2])
		}
		if d := peeks[0]; d.Remaining < 0 || d.Remaining > limit || d.Owed < 0 || d.Owed > 2*mc || d.Remaining > 0 && d.Owed > 0 {
			t.Fatalf("op %d: decision out of range: %+v", i, d)
		}
		if peeks[0].Owed > 0 {
			owing++
		}
	}
	return owing, bound
}

// TestChargeTwins runs the three forms against each other on random
// operations, for both kinds at every extreme of the limit.
func TestChargeTwins(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 54))
	runs := 40
	if testmain.Quick() {
		runs = 15
	}
	for _, k := range kinds {
		for _, rule := range []struct {
			limit  int64
			period time.Duration
		}{{1, time.Second}, {5, time.Millisecond}, {1000, time.Hour}, {3, 7}, {maxLimit(k.kind), time.Second}, {maxLimit(k.kind) / 3, 30 * 24 * time.Hour}} {
			p := mustParams(t, k.kind, rule.limit, rule.period)
			var owing, bound int
			for range runs {
				ops := make([]byte, 400)
				for i := range ops {
					ops[i] = byte(r.IntN(256))
				}
				o, b := runCharges(t, p, r.Int64N(1<<50)-1<<49, ops)
				owing, bound = owing+o, bound+b
			}
			if owing < runs*10 && p.MaxCount() > rule.limit || bound < runs {
				t.Errorf("%s %d per %v: %d peeks owing, %d charges past the bound: not exercised", k.name, rule.limit, rule.period, owing, bound)
			}
		}
	}
}

// TestChargeConcurrent: 64 goroutines on 8 Ps charge, admit and refund at
// one frozen instant. At the end the window's count is exactly what was
// charged and admitted less what was refunded; and once a charge has
// been seen to owe more than every refund could give back, no admission
// that starts afterwards is granted.
func TestChargeConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	const (
		N       = 1000
		workers = 64
		budget  = 5 * N // the most all refunds together give back
	)
	ops := 300
	if testmain.Quick() {
		ops = 150
	}
	for _, k := range kinds {
		p := mustParams(t, k.kind, N, time.Second)
		for _, f := range chargeForms {
			now := int64(7*time.Second) + 3
			s := f.new(p, now)
			var charged, admitted, refunded, refundLeft, denied, bound atomic.Int64
			var sticky atomic.Bool
			var bad atomic.Value
			refundLeft.Store(budget)
			var wg sync.WaitGroup
			for g := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 55))
					own := int64(0) // what this goroutine was granted or charged and has not refunded
					for i := range ops {
						op := r.IntN(10)
						if i == 0 {
							op = 5 // an AllowN first: the first operation of all is granted
						}
						switch {
						case op < 3:
							n := 1 + r.Int64N(N/20)
							if r.IntN(25) == 0 {
								n = p.MaxCount() / 32
							}
							d, _, err := s.ChargeN(now, n)
							switch {
							case errors.Is(err, ErrDebtBound):
								bound.Add(1)
							case err != nil || !d.Allowed:
								bad.Store(fmt.Sprintf("a charge failed: %+v, %v", d, err))
							default:
								charged.Add(n)
								own += n
								if d.Owed > budget {
									sticky.Store(true)
								}
							}
						case op < 8:
							n := 1 + r.Int64N(3)
							after := sticky.Load()
							d, _ := s.AllowN(now, n)
							if !d.Allowed {
								denied.Add(1)
								continue
							}
							if after || d.Owed != 0 {
								bad.Store("admitted in debt")
							}
							admitted.Add(n)
							own += n
						default:
							n := min(own, 1+r.Int64N(N/8))
							if n < 1 {
								continue
							}
							if left := refundLeft.Add(-n); left < 0 {
								refundLeft.Add(n)
								continue
							}
							s.Refund(now, n)
							refunded.Add(n)
							own -= n
						}
					}
				}()
			}
			wg.Wait()
			if v := bad.Load(); v != nil {
				t.Fatalf("%s %s: %s", k.name, f.name, v)
			}
			d, _ := s.Peek(now)
			count := N - d.Remaining + d.Owed
			if d.Allowed {
				count = N - d.Remaining - 1
			}
			want := charged.Load() + admitted.Load() - refunded.Load()
			if count != want {
				t.Errorf("%s %s: the count is %d, want %d charged + %d admitted − %d refunded = %d",
					k.name, f.name, count, charged.Load(), admitted.Load(), refunded.Load(), want)
			}
			if admitted.Load() == 0 || denied.Load() == 0 || bound.Load() == 0 || refunded.Load() == 0 || !sticky.Load() {
				t.Errorf("%s %s: %d admitted, %d denied, %d past the bound, %d refunded, debt seen %v: not exercised",
					k.name, f.name, admitted.Load(), denied.Load(), bound.Load(), refunded.Load(), sticky.Load())
			}
		}
	}
}

// TestEvictInDebt: a window evicted in debt comes back, from the instant
// Evict reports, never looser than it would have been: the fixed window
// at the window's end; the sliding counter a window later than a count
// within the limit, since the N it is made with weighs less than the debt.
// It owes what the original owes at the eviction's reading, and never
// less after (the fixed window: exactly as much, to the window's end).
func TestEvictInDebt(t *testing.T) {
	const T = int64(time.Second)
	for _, k := range kinds {
		p := mustParams(t, k.kind, 100, time.Second)
		for _, c := range []struct {
			name    string
			history func(s *MutexWindow)
			fixed   int64 // what Evict reports, for each kind
			sliding int64
		}{
			// The fixed window is new from the end of its window; the
			// sliding counter's 450 weighs through window 6, and the state
			// made again holds N in window 6 instead of 5.
			{"curr in debt", func(s *MutexWindow) { s.ChargeN(5*T+T/3, 450) }, 6 * T, 8 * T},
			{"prev in debt", func(s *MutexWindow) { // charged in 5, emptied in 6
				s.ChargeN(5*T+T/3, 450)
				s.ChargeN(6*T+1, 7)
				s.Refund(6*T+1, 7)
			}, 6 * T, 8 * T},
		} {
			orig, ev := NewMutex(p, 5*T), NewMutex(p, 5*T)
			c.history(orig)
			c.history(ev)
			at := 6*T + 2
			spent, owed := ev.Evict(at)
			want := c.fixed
			if k.kind == Sliding {
				want = c.sliding
			}
			if do, _ := orig.Peek(at); spent != want || (owed > 0) != (do.Owed > 0) || k.kind == Fixed && owed != do.Owed {
				t.Fatalf("%s %s: Evict reports %d owing %d, want %d owing %d", k.name, c.name, spent, owed, want, do.Owed)
			}
			made := NewMutexSpent(p, at, spent, owed)
			if again, o := NewMutexSpent(p, at, spent, owed).Evict(at); spent > at && (again != spent || o != owed) {
				t.Fatalf("%s %s: made from %d owing %d, Evict reports %d owing %d", k.name, c.name, spent, owed, again, o)
			}
			for now := at; now < spent+2*T; now += T / 50 {
				dm, _ := made.Peek(now)
				do, _ := orig.Peek(now)
				if dm.Allowed && !do.Allowed || dm.Remaining > do.Remaining || dm.Owed < do.Owed ||
					now == at && dm.Owed != do.Owed || k.kind == Fixed && dm.Owed != do.Owed {
					t.Fatalf("%s %s: at %d the state made again answers %+v, the original %+v", k.name, c.name, now, dm, do)
				}
			}
		}
	}
}

// TestConvertDebt: a rule change carries what the key owes, in units, as
// far as the new rule's bound holds it.
func TestConvertDebt(t *testing.T) {
	const T = int64(time.Hour)
	for _, k := range kinds {
		p := mustParams(t, k.kind, 1000, time.Hour)
		for _, c := range []struct {
			limit int64
			owed  int64 // charged beyond 1,000 at T/2
			want  int64 // what the converted key owes
		}{{2000, 500, 500}, {10, 500, 500}, {1, 500, 500}, {1, 2000, 1021}, {5000, 0, 0}} {
			q := mustParams(t, k.kind, c.limit, time.Minute)
			s := NewMutex(p, 0)
			s.ChargeN(T/2, 1000+c.owed)
			v := p.ConvertValue(s.word, s.origin, T/2, &q)
			n := s.ConvertTo(T/2, q)
			if n.word != v || n.origin != q.Origin(T/2) {
				t.Fatalf("%s to %d: ConvertTo gives %#x at %d, ConvertValue %#x", k.name, c.limit, n.word, n.origin, v)
			}
			d, _ := n.Peek(T / 2)
			if d.Owed != c.want || d.Allowed {
				t.Fatalf("%s owing %d, to %d per minute: %+v, want %d owed", k.name, c.owed, c.limit, d, c.want)
			}
			if d, _ := s.Peek(T / 2); d != (Decision{}) {
				t.Fatalf("%s: the converted state still answers: %+v", k.name, d)
			}
		}
	}
}

// TestDebtNotIdle: a window in debt is never retired as idle; and a word's
// charge meets the marks and the range as its other operations do.
func TestDebtNotIdle(t *testing.T) {
	const T = 7 // short, so that the edge of the range is an instant
	for _, k := range kinds {
		p := mustParams(t, k.kind, 10, T)
		s := New(p, 0)
		s.ChargeN(T/2, 50)
		if s.RetireIdle(T / 2) {
			t.Fatalf("%s: retired in debt", k.name)
		}
		var w atomic.Uint64
		if d, st, err := p.ChargeWord(&w, 0, T/2, 50); st != word.Live || err != nil || d.Owed != 40 {
			t.Fatalf("%s: ChargeWord %+v %v %v", k.name, d, st, err)
		}
		if p.RetireIdleWord(&w, 0, T/2) {
			t.Fatalf("%s: a word in debt retired as idle", k.name)
		}
		held := w.Load()
		if _, st, err := p.ChargeWord(&w, 0, (p.maxRel+1)*T, 1); st != word.Rebase || err != nil || w.Load() != held {
			t.Fatalf("%s: a charge past the range: %v %v, word %#x (was %#x)", k.name, st, err, w.Load(), held)
		}
		for _, m := range []uint64{word.Moved, word.Dead} {
			w.Store(m)
			if _, st, err := p.ChargeWord(&w, 0, T/2, 1); st != word.Gone || err != nil || w.Load() != m {
				t.Fatalf("%s: a charge on a mark: %v %v", k.name, st, err)
			}
		}
		if _, st, err := p.ChargeWord(&w, 0, T/2, 0); st != word.Live || err == nil || w.Load() != word.Dead {
			t.Fatalf("%s: a charge of 0: %v %v", k.name, st, err)
		}
		// A Window charged past its range retires, and its successor starts
		// new: the debt's window is long over.
		s = New(p, 0)
		s.ChargeN(T/2, 50)
		late := (p.maxRel + 1) * T
		if _, live, _ := s.ChargeN(late, 1); live {
			t.Fatalf("%s: charged past the range", k.name)
		}
		if d, _ := s.Successor(late).Peek(late); d.Owed != 0 {
			t.Fatalf("%s: an old debt survived the range: %+v", k.name, d)
		}
	}
}

// BenchmarkCharge is ChargeN beside AllowN on one key, in each form,
// called directly, at a clock that moves 1µs a call: 1,000 a window of a
// millisecond, so that the charges stay within the limit and both
// operations write the word every time.
func BenchmarkCharge(b *testing.B) {
	for _, k := range kinds {
		p := mustParams(b, k.kind, 1000, time.Millisecond)
		s, m := New(p, 0), NewMutex(p, 0)
		var w atomic.Uint64
		ops := []struct {
			name string
			call func(now int64)
		}{
			{"impl=lockfree/op=ChargeN", func(now int64) { s.ChargeN(now, 1) }},
			{"impl=lockfree/op=AllowN", func(now int64) { s.AllowN(now, 1) }},
			{"impl=mutex/op=ChargeN", func(now int64) { m.ChargeN(now, 1) }},
			{"impl=mutex/op=AllowN", func(now int64) { m.AllowN(now, 1) }},
			{"impl=word/op=ChargeWord", func(now int64) { p.ChargeWord(&w, 0, now, 1) }},
			{"impl=word/op=AllowWord", func(now int64) { p.AllowWord(&w, 0, now, 1) }},
		}
		var now int64
		for _, op := range ops {
			b.Run("kind="+k.name+"/"+op.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					now += 1000
					op.call(now)
				}
			})
		}
	}
}
