package bucket

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/word"
)

// charger is what the charge tests drive: the three objects and the
// inline word.
type charger interface {
	AllowN(now, n int64) (Decision, bool)
	Take(now, n int64) (bool, bool)
	Peek(now int64) (Decision, bool)
	Refund(n int64) bool
	ChargeN(now, n int64) (Decision, bool, error)
}

// wordState is the inline word in a table of one key. Its word-level
// answers are the word functions' own; a word.Rebase moves the origin and
// carries the word as a retired Bucket's successor does (what the table
// does for every key at once), and reports live false, as the Bucket does
// when it retires, so that both are compared answer by answer.
type wordState struct {
	p      Params
	origin int64
	w      atomic.Uint64
}

func newWordState(p Params, now int64) *wordState {
	s := &wordState{p: p, origin: now}
	v, st := p.NewWord(now, now, now)
	if st != word.Live {
		panic("a new word at its own origin")
	}
	s.w.Store(v)
	return s
}

// rebase moves the word to the origin of a retired Bucket's successor at
// now, which lies past the range.
func (s *wordState) rebase(now int64) {
	t, pos := s.p.ticks(now, s.origin)
	retired, _, _ := s.p.allow(int64(s.w.Load()), t, pos, 1)
	origin, v := s.p.successor(retired, s.origin, now)
	s.origin = origin
	s.w.Store(uint64(v))
}

func (s *wordState) live(st word.Status, now int64) bool {
	switch st {
	case word.Live:
		return true
	case word.Rebase:
		s.rebase(now)
		return false
	}
	panic(fmt.Sprintf("status %d on a word no table marks", st))
}

func (s *wordState) AllowN(now, n int64) (Decision, bool) {
	d, st := s.p.AllowWord(&s.w, s.origin, now, n)
	return d, s.live(st, now)
}

func (s *wordState) Take(now, n int64) (bool, bool) {
	ok, st := s.p.TakeWord(&s.w, s.origin, now, n)
	return ok, s.live(st, now)
}

func (s *wordState) Peek(now int64) (Decision, bool) {
	return s.p.PeekValue(s.w.Load(), s.origin, now), true
}

func (s *wordState) Refund(n int64) bool { return s.p.RefundWord(&s.w, n) == word.Live }

func (s *wordState) ChargeN(now, n int64) (Decision, bool, error) {
	d, st, err := s.p.ChargeWord(&s.w, s.origin, now, n)
	return d, s.live(st, now), err
}

type chargeMaker struct {
	name string
	new  func(p Params, now int64) charger
}

// chargers are the four forms of one semantics; the first is the one
// whose state the tests read to aim at the bound.
var chargers = []chargeMaker{
	{"lockfree", func(p Params, now int64) charger { return New(p, now) }},
	{"mutex", func(p Params, now int64) charger { return NewMutex(p, now) }},
	{"leaky", func(p Params, now int64) charger { return NewLeakyMutex(p, now) }},
	{"word", func(p Params, now int64) charger { return newWordState(p, now) }},
}

func chargeSuccessor(c charger, now int64) charger {
	switch s := c.(type) {
	case *Bucket:
		return s.Successor(now)
	case *MutexBucket:
		return s.Successor(now)
	case *LeakyMutex:
		return s.Successor(now)
	case *wordState:
		return s // moved to its new origin when it reported the rebase
	}
	panic("unknown charger")
}

// TestChargeTable: exact answers of charges into debt, the refusals while
// in debt, the repayment at the rate, and exact refunds, on every form.
func TestChargeTable(t *testing.T) {
	ms := time.Millisecond
	// 10 per second, burst 3: a token every 100ms, tau 300ms.
	type step struct {
		op   string // allow, charge, peek, refund
		at   time.Duration
		n    int64
		want Decision
	}
	owe := func(allowed bool, owed int64, retry, reset time.Duration) Decision {
		return Decision{Allowed: allowed, Limit: 3, Owed: owed, RetryAfter: retry, ResetAfter: reset}
	}
	steps := []step{
		{"charge", 0, 5, owe(true, 2, 300*ms, 500*ms)}, // 2 past the empty bucket
		{"allow", 0, 1, owe(false, 2, 300*ms, 500*ms)}, // the debt, then the token
		{"allow", 0, 3, owe(false, 2, 500*ms, 500*ms)},
		{"peek", 100 * ms, 0, owe(false, 1, 200*ms, 400*ms)},
		{"allow", 199 * ms, 1, owe(false, 1, 101*ms, 301*ms)}, // 1ms of a unit: owed, rounded up
		{"allow", 200 * ms, 1, owe(false, 0, 100*ms, 300*ms)}, // paid, and empty
		{"allow", 300 * ms, 1, dec(true, 3, 0, 0, 300*ms)},
		{"charge", 300 * ms, 1, owe(true, 1, 200*ms, 400*ms)},
		{"refund", 0, 1, Decision{}},
		{"peek", 300 * ms, 0, owe(false, 0, 100*ms, 300*ms)},
		// A refund after a charge into debt is exact at a frozen clock.
		{"charge", 300 * ms, 7, owe(true, 7, 800*ms, time.Second)},
		{"refund", 0, 3, Decision{}},
		{"peek", 300 * ms, 0, owe(false, 4, 500*ms, 700*ms)},
		{"refund", 0, 3, Decision{}},
		{"peek", 300 * ms, 0, owe(false, 1, 200*ms, 400*ms)},
		{"refund", 0, 1, Decision{}},
		{"peek", 300 * ms, 0, owe(false, 0, 100*ms, 300*ms)},
		{"allow", 600 * ms, 3, dec(true, 3, 0, 0, 300*ms)},
		// A charge that leaves tokens: nothing owed, a request could pass.
		{"charge", 2 * time.Second, 1, dec(true, 3, 2, 0, 100*ms)},
		{"charge", 2 * time.Second, 2, owe(true, 0, 100*ms, 300*ms)},
		// The clock moves back: the reading finds more owed, never less.
		{"peek", 1900 * ms, 0, owe(false, 1, 200*ms, 400*ms)},
	}
	p := mustParams(t, 10, time.Second, 3)
	const origin = 7_000_000
	for _, mk := range chargers {
		b := mk.new(p, origin)
		for i, s := range steps {
			var got Decision
			live := true
			var err error
			switch s.op {
			case "allow":
				got, live = b.AllowN(origin+int64(s.at), s.n)
			case "charge":
				got, live, err = b.ChargeN(origin+int64(s.at), s.n)
			case "peek":
				got, live = b.Peek(origin + int64(s.at))
			case "refund":
				live = b.Refund(s.n)
			}
			if err != nil || !live || got != s.want {
				t.Errorf("%s step %d (%s at %v, n=%d): got %+v live=%v err=%v, want %+v", mk.name, i, s.op, s.at, s.n, got, live, err, s.want)
			}
		}
	}
}

// TestChargeRepays: a debt of 17 units is paid back one unit per interval,
// and the first request passes when the debt and its token are there.
func TestChargeRepays(t *testing.T) {
	p := mustParams(t, 10, time.Second, 3)
	iv := int64(100 * time.Millisecond)
	for _, mk := range chargers {
		b := mk.new(p, 0)
		if d, _, err := b.ChargeN(0, 20); err != nil || d.Owed != 17 {
			t.Fatalf("%s: a charge of 20 on a full bucket of 3: %+v, %v", mk.name, d, err)
		}
		for j := int64(0); j < 18; j++ {
			d, _ := b.Peek(j * iv)
			if d.Allowed || d.Owed != 17-j || d.Remaining != 0 || d.RetryAfter != time.Duration((18-j)*iv) {
				t.Fatalf("%s: %d intervals after the charge: %+v, want %d owed and a wait of %d intervals", mk.name, j, d, 17-j, 18-j)
			}
			if ok, _ := b.Take(j*iv+iv-1, 1); ok {
				t.Fatalf("%s: admitted 1ns before the debt and a token were there (%d intervals)", mk.name, j)
			}
		}
		if d, _ := b.AllowN(18*iv, 1); !d.Allowed || d.Owed != 0 {
			t.Fatalf("%s: the debt is paid and a token there at 1.8s: %+v", mk.name, d)
		}
	}
}

// TestChargeErrors: n < 1, the bound, and readings outside the range
// charge nothing; the bound's error says so and how much more fits.
func TestChargeErrors(t *testing.T) {
	for _, rule := range []struct {
		limit  int64
		period time.Duration
		burst  int64
	}{{10, time.Second, 3}, {3, time.Second, 0}, {999_983, time.Millisecond, 0}, {1, 1, 1}} {
		p := mustParams(t, rule.limit, rule.period, rule.burst)
		for _, mk := range chargers {
			const origin = 1 << 40
			b := mk.new(p, origin)
			now := int64(origin + time.Second)
			b.AllowN(now, 1)
			before, _ := b.Peek(now)
			for _, n := range []int64{0, -1, math.MinInt64} {
				if d, live, err := b.ChargeN(now, n); err == nil || errors.Is(err, ErrDebtBound) || !live || d != (Decision{}) {
					t.Fatalf("%s ChargeN(%d) = %+v %v %v, want a cost error", mk.name, n, d, live, err)
				}
			}
			for _, n := range []int64{math.MaxInt64, math.MaxInt64 / p.interval, 1 << 62} {
				if d, live, err := b.ChargeN(now, n); !errors.Is(err, ErrDebtBound) || !live || d != (Decision{}) {
					t.Fatalf("%s %v ChargeN(%d) = %+v %v %v, want ErrDebtBound", mk.name, rule, n, d, live, err)
				}
			}
			if after, _ := b.Peek(now); after != before {
				t.Fatalf("%s: a refused charge changed the bucket: %+v, then %+v", mk.name, before, after)
			}

			// Up to the bound exactly: the most the error names fits, one
			// more does not. The room is read off the error, and checked
			// against the state's range.
			_, _, err := b.ChargeN(now, math.MaxInt64)
			var room int64
			if _, e := fmt.Sscanf(err.Error()[strings.Index(err.Error(), "at most "):], "at most %d more", &room); e != nil {
				t.Fatalf("%s: the bound's error does not say how much fits: %v", mk.name, err)
			}
			tNow := (now - origin) * p.scale
			tat := tNow + p.interval // the AllowN's one unit, from a full bucket
			if want := (maxT - tat) / p.interval; room != want {
				t.Fatalf("%s %v: the error names room for %d, the range holds %d", mk.name, rule, room, want)
			}
			if _, _, err := b.ChargeN(now, room+1); !errors.Is(err, ErrDebtBound) {
				t.Fatalf("%s: a charge of room+1 = %d: %v", mk.name, room+1, err)
			}
			d, live, err := b.ChargeN(now, room)
			if err != nil || !live || !d.Allowed || d.Remaining != 0 {
				t.Fatalf("%s: a charge of the room %d: %+v %v %v", mk.name, room, d, live, err)
			}
			if want := (tat + room*p.interval - tNow - p.tau() + p.interval - 1) / p.interval; d.Owed != want {
				t.Fatalf("%s: at the bound %d owed, want %d", mk.name, d.Owed, want)
			}
			full, _ := b.Peek(now)
			if _, _, err := b.ChargeN(now, 1); !errors.Is(err, ErrDebtBound) || !strings.Contains(err.Error(), "at most 0 more") {
				t.Fatalf("%s: a charge past the bound: %v", mk.name, err)
			}
			if d, _ := b.AllowN(now, 1); d.Allowed || d != full {
				t.Fatalf("%s: at the bound AllowN answered %+v, Peek %+v", mk.name, d, full)
			}
			// Paid back at the rate: the bucket stays exact at the bound.
			later := now + int64(time.Second)
			if d, _ := b.Peek(later); d.ResetAfter != full.ResetAfter-time.Second {
				t.Fatalf("%s: a second later the debt is %v, was %v", mk.name, d.ResetAfter, full.ResetAfter)
			}

			// A reading too early for the range is an error, and charges
			// nothing; one past it retires the object (the word: Rebase).
			early := origin - 3*p.maxRel
			if d, live, err := b.ChargeN(early, 1); !errors.Is(err, ErrEarlyCharge) || !live || d != (Decision{}) {
				t.Fatalf("%s: a charge before the range: %+v %v %v", mk.name, d, live, err)
			}
			if after, _ := b.Peek(now); after != full {
				t.Fatalf("%s: an early charge changed the bucket", mk.name)
			}
		}
	}
}

// TestChargeWordStatus: the word's conventions, those of TakeWord and
// AllowWord: a mark is Gone, a reading past the range Rebase, and neither
// changes the word.
func TestChargeWordStatus(t *testing.T) {
	p := mustParams(t, 10, time.Second, 3)
	var w atomic.Uint64
	for _, mark := range []uint64{word.Moved, word.Dead} {
		w.Store(mark)
		if d, st, err := p.ChargeWord(&w, 0, 0, 5); st != word.Gone || err != nil || d != (Decision{}) || w.Load() != mark {
			t.Fatalf("ChargeWord on the mark %#x: %+v %v %v", mark, d, st, err)
		}
		if _, st, err := p.ChargeWord(&w, 0, 0, 0); st != word.Gone || err != nil {
			t.Fatalf("ChargeWord(0) on the mark %#x: %v %v", mark, st, err)
		}
	}
	w.Store(12345)
	for _, now := range []int64{p.maxRel + 1, math.MaxInt64} {
		if d, st, err := p.ChargeWord(&w, 0, now, 5); st != word.Rebase || err != nil || d != (Decision{}) || w.Load() != 12345 {
			t.Fatalf("ChargeWord past the range at %d: %+v %v %v", now, d, st, err)
		}
	}
	if _, st, err := p.ChargeWord(&w, 0, p.maxRel, 5); st != word.Live || err != nil || w.Load() != uint64(p.maxRel*p.scale+5*p.interval) {
		t.Fatalf("ChargeWord at the range's last ns: %v %v, word %d", st, err, w.Load())
	}
	// The objects retire past the range, and their successors take the
	// charge; the debt crosses the move of the origin exactly.
	for _, mk := range chargers[:3] {
		b := mk.new(p, 0)
		now := p.maxRel
		if _, _, err := b.ChargeN(now, 50); err != nil {
			t.Fatal(err)
		}
		later := now + int64(time.Second)
		want, _ := b.Peek(later)
		if _, live, err := b.ChargeN(later, 1); live || err != nil {
			t.Fatalf("%s: a charge past the range: live %v %v", mk.name, live, err)
		}
		s := chargeSuccessor(b, later)
		if got, _ := s.Peek(later); got != want {
			t.Fatalf("%s: the successor answers %+v, the bucket %+v", mk.name, got, want)
		}
	}
}

// TestChargeAllocs: a charge allocates nothing, in debt or not.
func TestChargeAllocs(t *testing.T) {
	p := mustParams(t, 1000, time.Second, 10)
	b := New(p, 0)
	var w atomic.Uint64
	now := int64(0)
	if a := testing.AllocsPerRun(1000, func() {
		now += int64(time.Millisecond) / 2
		b.ChargeN(now, 1)
		p.ChargeWord(&w, 0, now, 1)
	}); a != 0 {
		t.Fatalf("ChargeN allocates %v times a call", a)
	}
}

// applyCharges feeds the same operations to the four forms and requires
// the same answer from each at every step: AllowN, Take, Peek, Refund and
// ChargeN, with costs valid and not, charges that aim at the bound, and
// a clock that moves both ways, to the edges of the range and past them.
// It returns counts of what the sequence exercised.
func applyCharges(t *testing.T, p Params, origin int64, ops []byte) (seen map[string]int) {
	t.Helper()
	seen = map[string]int{}
	bs := make([]charger, len(chargers))
	for i, mk := range chargers {
		bs[i] = mk.new(p, origin)
	}
	now := origin
	step := max(1, p.interval/p.scale)
	for i := 0; i+1 < len(ops); i += 2 {
		op, arg := ops[i]%12, int64(ops[i+1])
		ref := bs[0].(*Bucket)
		switch op {
		case 7:
			now += arg * step / 4
			continue
		case 8:
			now -= arg * step / 8
			continue
		case 9: // the edges of the range: its last ns served in place and
			// the one after, the earliest reading held and the one before
			edges := []int64{ref.origin + p.maxRel, ref.origin - 2*p.maxRel}
			now = edges[arg%2] + arg/2%5 - 2
			continue
		case 10:
			now += arg << 53 // up to 2^61 ns: past the range at any scale
			continue
		case 11: // a long wait, that pays debts back
			now += arg * max(1, p.tau()/p.scale)
			continue
		}
		type answer struct {
			d    Decision
			ok   bool
			live bool
			err  string
		}
		var aim int64
		do := func(b charger) answer {
			var a answer
			var err error
			switch op {
			case 0, 1:
				a.d, a.live = b.AllowN(now, arg%(p.capacity+2))
			case 2:
				a.ok, a.live = b.Take(now, arg%(p.capacity+2))
			case 3:
				a.d, a.live = b.Peek(now)
			case 4:
				a.live = b.Refund(arg % (p.capacity + 1))
			case 5:
				a.d, a.live, err = b.ChargeN(now, arg%(3*p.capacity+2))
			case 6:
				a.d, a.live, err = b.ChargeN(now, aim)
			}
			if err != nil {
				a.err = err.Error()
			}
			return a
		}
		for try := 0; ; try++ {
			// op 6 aims at the bound: the room the state has, give or take.
			ref := bs[0].(*Bucket)
			aim = arg
			if tk, pos := p.ticks(now, ref.origin); pos == inRange {
				aim = (maxT-max(ref.tat.Load(), tk))/p.interval + arg%5 - 3
			}
			want := do(bs[0])
			for j, b := range bs[1:] {
				if got := do(b); got != want {
					t.Fatalf("op %d (%d, arg %d) at %d (origin %d): %s %+v, %s %+v", i, op, arg, now, ref.origin, chargers[0].name, want, chargers[j+1].name, got)
				}
			}
			d := want.d
			if d.Remaining < 0 || d.Remaining > p.capacity || d.Owed < 0 || d.RetryAfter < 0 || d.ResetAfter < 0 ||
				(d.Remaining > 0 && d.Owed > 0) || (op < 2 && d.Allowed && d.Owed > 0) {
				t.Fatalf("op %d (%d): a decision out of range: %+v", i, op, d)
			}
			switch {
			case !want.live:
				seen["retired"]++
			case want.err != "" && strings.Contains(want.err, ErrDebtBound.Error()):
				seen["bound"]++
			case want.err != "":
				seen["error"]++
			case op >= 5 && d.Owed > 0:
				seen["debt"]++
			case op < 2 && !d.Allowed && d.Owed > 0:
				seen["refused in debt"]++
			}
			if want.live {
				break
			}
			if try > 0 {
				t.Fatalf("op %d (%d): a successor retired at once", i, op)
			}
			for j, b := range bs {
				bs[j] = chargeSuccessor(b, now)
			}
		}
	}
	return seen
}

var chargeRules = []struct {
	limit  int64
	period time.Duration
	burst  int64
}{
	{10, time.Second, 3}, {3, time.Second, 5}, {7, time.Minute, 0}, {1000, time.Millisecond, 1},
	{999_983, time.Millisecond, 0}, {6, 7, 2}, {1, 1, 1}, {1_000_000, 30 * 24 * time.Hour, 0},
}

// TestChargeDifferential runs random sequences through applyCharges on
// several rules and requires that they reach debts, the bound, refusals
// in debt, the retirement past the range and the readings before it.
func TestChargeDifferential(t *testing.T) {
	r := rand.New(rand.NewPCG(42, 43))
	total := map[string]int{}
	for _, rule := range chargeRules {
		p := mustParams(t, rule.limit, rule.period, rule.burst)
		for range 60 {
			ops := make([]byte, 2*(20+r.IntN(200)))
			for i := range ops {
				ops[i] = byte(r.UintN(256))
			}
			for k, v := range applyCharges(t, p, r.Int64N(1<<50)-1<<49, ops) {
				total[k] += v
			}
		}
	}
	for _, k := range []string{"retired", "bound", "error", "debt", "refused in debt"} {
		if total[k] < 50 {
			t.Errorf("%d steps of kind %q: the sequences do not exercise it (%v)", total[k], k, total)
		}
	}
}

// FuzzCharge is TestChargeDifferential's check on the fuzzer's input: the
// first bytes pick a rule and an origin, the rest are operations.
func FuzzCharge(f *testing.F) {
	f.Add([]byte{0, 0, 0, 5, 5, 0, 1, 0, 3, 0, 4, 1, 6, 3, 6, 3, 1, 2, 7, 200, 1, 1})
	f.Add([]byte{1, 3, 200, 6, 2, 6, 4, 6, 0, 1, 3, 9, 0, 5, 1, 7, 9, 1, 6, 1, 0, 1})
	f.Add([]byte{4, 100, 5, 30, 0, 1, 6, 3, 9, 2, 5, 4, 9, 3, 6, 4, 10, 1, 1, 1, 6, 2})
	f.Add([]byte{6, 7, 6, 8, 5, 9, 11, 3, 1, 1, 5, 250, 8, 255, 1, 2, 4, 3, 3, 0})
	f.Add([]byte{7, 1, 5, 200, 5, 200, 1, 1, 11, 1, 3, 0, 9, 1, 5, 1, 9, 0, 6, 3})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 2 {
			return
		}
		rule := chargeRules[int(data[0])%len(chargeRules)]
		p := mustParams(t, rule.limit, rule.period, rule.burst)
		applyCharges(t, p, int64(int8(data[1]))<<40, data[2:])
	})
}

// TestChargeConcurrent: 64 goroutines on more Ps than cores mix ChargeN,
// AllowN and Refund on one bucket at a frozen clock. The TAT at the end is
// exactly what was charged and admitted less what was refunded. And no
// request is admitted while the bucket is in debt at any instant the test
// can observe: every grant and charge reports the TAT it left, the clock
// is frozen so only refunds lower it, and each refund is counted before it
// starts and after it ends; so for a request that starts after a
// grant or charge C has returned, the TAT it meets is at least C's less
// every refund that was not over before C began and had begun before the
// request ended. When that bound leaves no room for the request, it must
// be refused.
func TestChargeConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	p := mustParams(t, 1000, time.Second, 100) // 1ms a unit, tau 100ms, scale 1
	const origin, goroutines = 1_000_000_000, 64
	ops := 300
	if testing.Short() {
		ops = 100
	}
	type witness struct{ e, tat, refEnded int64 } // a TAT a request saw or left
	type attempt struct {
		s, n, refStarted int64
		granted          bool
	}
	for _, mk := range chargers {
		b := mk.new(p, origin)
		retries := chaos.Retries()
		// pool holds the units taken and not yet claimed for a refund: a
		// refund claims its units after the take that added them returned,
		// so the TAT never goes below the frozen clock and stays exact.
		var seq, refStarted, refEnded, taken, refunded, pool atomic.Int64
		witnesses := make([][]witness, goroutines)
		attempts := make([][]attempt, goroutines)
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(g), 77))
				owed := false // what this goroutine last saw
				for range ops {
					k := r.IntN(20)
					var n int64 // a refund's units, claimed from the pool
					if k >= 18 || owed && k >= 10 {
						n = claim(&pool, 1+r.Int64N(p.capacity/2))
					}
					switch {
					case n > 0:
						refStarted.Add(n)
						b.Refund(n)
						refEnded.Add(n)
						refunded.Add(n)
					case k < 3:
						n = 1 + r.Int64N(60)
						ended := refEnded.Load()
						seq.Add(1)
						d, _, err := b.ChargeN(origin, n)
						e := seq.Add(1)
						if err != nil || !d.Allowed {
							t.Errorf("%s: ChargeN(%d): %+v %v", mk.name, n, d, err)
							return
						}
						witnesses[g] = append(witnesses[g], witness{e, int64(d.ResetAfter), ended})
						taken.Add(n)
						pool.Add(n)
						owed = d.Owed > 0
					default:
						n = 1 + r.Int64N(3)
						ended := refEnded.Load()
						s := seq.Add(1)
						d, _ := b.AllowN(origin, n)
						e := seq.Add(1)
						attempts[g] = append(attempts[g], attempt{s, n, refStarted.Load(), d.Allowed})
						// A grant reports the TAT it left, a denial the TAT it read.
						witnesses[g] = append(witnesses[g], witness{e, int64(d.ResetAfter), ended})
						if d.Allowed {
							if d.Owed != 0 {
								t.Errorf("%s: a grant owes: %+v", mk.name, d)
							}
							taken.Add(n)
							pool.Add(n)
						}
						owed = d.Owed > 0
					}
				}
			}()
		}
		wg.Wait()
		if t.Failed() {
			return
		}

		want := (taken.Load() - refunded.Load()) * p.interval
		d, _ := b.Peek(origin)
		tat := int64(d.ResetAfter)
		if d.Allowed {
			tat -= p.interval // Peek answers as AllowN(now, 1) would: after its unit
		}
		if tat != want {
			t.Fatalf("%s: the TAT is %v past the clock, want %v (%d taken, %d refunded)", mk.name, time.Duration(tat), time.Duration(want), taken.Load(), refunded.Load())
		}
		if wantOwed := max(0, (want-p.tau()+p.interval-1)/p.interval); d.Owed != wantOwed {
			t.Fatalf("%s: owes %d at the end, want %d", mk.name, d.Owed, wantOwed)
		}

		var ws []witness
		var as []attempt
		for g := range goroutines {
			ws = append(ws, witnesses[g]...)
			as = append(as, attempts[g]...)
		}
		sort.Slice(ws, func(i, j int) bool { return ws[i].e < ws[j].e })
		sort.Slice(as, func(i, j int) bool { return as[i].s < as[j].s })
		best := int64(math.MinInt64) // the largest TAT + refEnded × interval of the witnesses before
		var inDebt, granted int
		k := 0
		for _, a := range as {
			for ; k < len(ws) && ws[k].e < a.s; k++ {
				best = max(best, ws[k].tat+ws[k].refEnded*p.interval)
			}
			if a.granted {
				granted++
			}
			if best == math.MinInt64 {
				continue
			}
			floor := best - a.refStarted*p.interval // the least TAT the request met
			if floor > p.tau() {
				inDebt++
			}
			if a.granted && floor+a.n*p.interval > p.tau() {
				t.Fatalf("%s: a request of %d admitted when the bucket owed at least %v past empty", mk.name, a.n, time.Duration(floor-p.tau()))
			}
		}
		if least := ops / 6; inDebt < least || granted < least {
			t.Errorf("%s: %d requests met an observed debt, %d granted: the run does not exercise both", mk.name, inDebt, granted)
		}
		if chaos.Enabled && mk.name != "mutex" && mk.name != "leaky" && chaos.Retries() == retries {
			t.Errorf("%s: no CAS lost under the chaos build: the run proves nothing about the retries", mk.name)
		}
		t.Logf("%s: %d attempts, %d granted, %d met an observed debt; TAT %v past the clock", mk.name, len(as), granted, inDebt, time.Duration(tat))
	}
}

// claim takes up to want units from pool, and returns how many it took.
func claim(pool *atomic.Int64, want int64) int64 {
	for {
		v := pool.Load()
		n := min(v, want)
		if n <= 0 || pool.CompareAndSwap(v, v-n) {
			return max(n, 0)
		}
	}
}
