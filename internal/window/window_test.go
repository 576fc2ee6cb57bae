package window

import (
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/floodgate-go/floodgate/internal/testmain"
	"github.com/floodgate-go/floodgate/internal/twintest"
)

type twin = twintest.Twin

type maker struct {
	name string
	new  func(p Params, now int64) twin
	succ func(s twin, now int64) twin
}

var twins = []maker{
	{"lockfree", func(p Params, now int64) twin { return New(p, now) }, func(s twin, now int64) twin { return s.(*Window).Successor(now) }},
	{"mutex", func(p Params, now int64) twin { return NewMutex(p, now) }, func(s twin, now int64) twin { return s.(*MutexWindow).Successor(now) }},
}

var kinds = []struct {
	name string
	kind Kind
}{{"fixed", Fixed}, {"sliding", Sliding}}

func mustParams(t testing.TB, kind Kind, limit int64, period time.Duration) Params {
	t.Helper()
	p, err := NewParams(kind, limit, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLayout(t *testing.T) {
	// 64 bytes on 64-bit platforms; 56 on 32-bit ones, where a pointer is
	// half as wide. Either way the allocator's 64-byte size class holds it,
	// at a multiple of 64, which the loop below checks.
	if got := unsafe.Sizeof(Window{}); got > 64 || got <= 48 {
		t.Fatalf("Window is %d bytes, want 49 to 64 (the 64-byte size class)", got)
	}
	p := mustParams(t, Fixed, 10, time.Second)
	lines := map[uintptr]bool{}
	live := make([]*Window, 0, 1000)
	for range 1000 {
		w := New(p, 0)
		live = append(live, w)
		if addr := uintptr(unsafe.Pointer(w)); lines[addr/64] {
			t.Fatalf("two windows' words share a cache line")
		} else {
			lines[addr/64] = true
		}
	}
	runtime.KeepAlive(live)
}

func TestNewParams(t *testing.T) {
	bad := []struct {
		kind   Kind
		limit  int64
		period time.Duration
	}{
		{Fixed, 0, time.Second}, {Sliding, -1, time.Second}, {Fixed, 10, 0}, {Sliding, 10, -5},
		{Kind(9), 10, time.Second}, {Sliding, 1 << 23, time.Second}, {Fixed, 1 << 47, time.Second},
	}
	for _, b := range bad {
		if _, err := NewParams(b.kind, b.limit, b.period); err == nil {
			t.Errorf("NewParams(%d, %d, %v) accepted", b.kind, b.limit, b.period)
		}
	}
	for _, k := range kinds {
		for _, limit := range []int64{1, 1_000_000} {
			for _, period := range []time.Duration{time.Millisecond, 30 * 24 * time.Hour} {
				mustParams(t, k.kind, limit, period)
			}
		}
	}
	mustParams(t, Sliding, 1<<23-2, time.Second)
	mustParams(t, Fixed, 1<<47-2, time.Second)
}

func TestPackRoundTrip(t *testing.T) {
	for _, k := range kinds {
		p := mustParams(t, k.kind, 1_000_000, time.Millisecond)
		for _, rel := range []int64{0, 1, -1, p.maxRel, -p.maxRel} {
			for _, c := range []int64{0, 1, 999_999, 1_000_000} {
				prev := int64(0)
				if k.kind == Sliding {
					prev = 1_000_000 - c
				}
				r, cc, pp := p.unpack(p.pack(rel, c, prev))
				if r != rel || cc != c || pp != prev {
					t.Fatalf("%s: pack(%d,%d,%d) unpacked as (%d,%d,%d)", k.name, rel, c, prev, r, cc, pp)
				}
			}
		}
	}
}

// model is the window algorithms in plain arithmetic: a count per window,
// the estimate as a big.Rat. RetryAfter and ResetAfter are found by search,
// which is valid because without new requests the estimate never rises.
type model struct {
	kind   Kind
	limit  int64
	period int64
	counts map[int64]int64
	last   int64 // the latest window written
}

func newModel(kind Kind, limit int64, period time.Duration) *model {
	return &model{kind: kind, limit: limit, period: int64(period), counts: map[int64]int64{}, last: math.MinInt64}
}

func (m *model) estimate(now int64, extra int64) *big.Rat {
	k, e := floorDivMod(now, m.period)
	est := big.NewRat(m.counts[k]+extra, 1)
	if m.kind == Sliding {
		w := big.NewRat(m.counts[k-1]*(m.period-e), m.period)
		est.Add(est, w)
	}
	return est
}

func (m *model) fits(now, n int64) bool {
	return m.estimate(now, n).Cmp(big.NewRat(m.limit, 1)) <= 0
}

// search returns the smallest wait w in [0, 3T] with ok(now+w).
func (m *model) search(now int64, ok func(int64) bool) time.Duration {
	lo, hi := int64(0), 3*m.period
	for lo < hi {
		mid := lo + (hi-lo)/2
		if ok(now + mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return time.Duration(lo)
}

func (m *model) remaining(now int64) int64 {
	est := m.estimate(now, 0)
	left := new(big.Rat).Sub(big.NewRat(m.limit, 1), est)
	q := new(big.Int).Div(left.Num(), left.Denom())
	return max(0, q.Int64())
}

func (m *model) allowN(now, n int64) Decision {
	k, _ := floorDivMod(now, m.period)
	d := Decision{Limit: m.limit}
	switch {
	case n < 1 || n > m.limit:
		d.RetryAfter = Never
	case m.fits(now, n):
		m.counts[k] += n
		m.last = max(m.last, k)
		d.Allowed = true
	default:
		d.RetryAfter = m.search(now, func(t int64) bool { return m.fits(t, n) })
	}
	d.Remaining = m.remaining(now)
	d.Owed = m.owed(now)
	d.ResetAfter = m.search(now, func(t int64) bool { return m.remaining(t) == m.limit })
	return d
}

// owed is ceil(estimate − N), or 0 when the estimate is at most N.
func (m *model) owed(now int64) int64 {
	over := new(big.Rat).Sub(m.estimate(now, 0), big.NewRat(m.limit, 1))
	if over.Sign() <= 0 {
		return 0
	}
	q := new(big.Int).Sub(over.Num(), big.NewInt(1))
	q.Div(q, over.Denom())
	return q.Int64() + 1
}

func TestTable(t *testing.T) {
	const T = int64(time.Second)
	type step struct {
		at   int64
		n    int64
		want Decision
	}
	tables := map[Kind][]step{
		Fixed: {
			{0, 3, dec(true, 4, 1, 0, time.Second)},
			{T - 1, 1, dec(true, 4, 0, 0, 1)},
			{T - 1, 1, dec(false, 4, 0, 1, 1)},
			// The known burst: N at the end of window 0, N at the start of 1.
			{T, 4, dec(true, 4, 0, 0, time.Second)},
			{T + 5, 5, dec(false, 4, 0, Never, time.Second-5)},
			{T + 5, 0, dec(false, 4, 0, Never, time.Second-5)},
			// A reading from window 0, after window 1 was written: denied.
			{T - 2, 1, dec(false, 4, 0, time.Second+2, time.Second+2)},
			{5 * T, 1, dec(true, 4, 3, 0, time.Second)},
		},
		Sliding: {
			{0, 4, dec(true, 4, 0, 0, 2*time.Second)},
			{T / 2, 1, dec(false, 4, 0, time.Second*3/4-1+1, time.Second*3/2)},
			// At 1.25T, prev=4 weighs 3: one more fits.
			{T + T/4, 1, dec(true, 4, 0, 0, time.Second*7/4)},
			{T + T/4, 1, dec(false, 4, 0, time.Second/4, time.Second*7/4)},
			{3 * T, 4, dec(true, 4, 0, 0, 2*time.Second)},
		},
	}
	for _, k := range kinds {
		p := mustParams(t, k.kind, 4, time.Second)
		for _, m := range twins {
			s := m.new(p, 0)
			for i, st := range tables[k.kind] {
				got, live := s.AllowN(st.at, st.n)
				if !live || got != st.want {
					t.Errorf("%s %s step %d (at %v, n=%d): got %+v, want %+v", k.name, m.name, i, time.Duration(st.at), st.n, got, st.want)
				}
			}
		}
	}
}

// TestAgainstModel drives both twins and the plain model with random
// non-decreasing times and costs; every Decision must be equal.
func TestAgainstModel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	rules := []struct {
		limit  int64
		period time.Duration
	}{{1, time.Second}, {5, time.Second}, {7, 3 * time.Millisecond}, {100, time.Minute}, {3, 7}}
	steps, least := 2000, 50 // each twin's steps, and the least of both answers they must see
	if testmain.Quick() {
		steps, least = 1000, 20 // the model's big.Rat arithmetic is slow under the race detector
	}
	for _, k := range kinds {
		for _, rule := range rules {
			p := mustParams(t, k.kind, rule.limit, rule.period)
			for _, mk := range twins {
				now := r.Int64N(1<<40) - 1<<39
				s := mk.new(p, now)
				ref := newModel(k.kind, rule.limit, rule.period)
				var allowed, denied int
				for i := range steps {
					switch op := r.IntN(40); {
					case op < 24:
						now += r.Int64N(int64(rule.period)/rule.limit + 1)
					case op < 26:
						now += r.Int64N(3 * int64(rule.period))
					case op < 30:
						now += r.Int64N(2)
					}
					n := 1 + r.Int64N(min(3, rule.limit))
					if r.IntN(40) == 0 {
						n = rule.limit + 1
					}
					got, live := s.AllowN(now, n)
					want := ref.allowN(now, n)
					if !live || got != want {
						t.Fatalf("%s %d per %v, %s, step %d at %d (n=%d): got %+v, want %+v",
							k.name, rule.limit, rule.period, mk.name, i, now, n, got, want)
					}
					if got.Allowed {
						allowed++
					} else if got.RetryAfter != Never {
						denied++
					}
				}
				if allowed < least || denied < least {
					t.Errorf("%s %d per %v: %d allowed, %d denied: not both exercised", k.name, rule.limit, rule.period, allowed, denied)
				}
			}
		}
	}
}

// TestIdleGaps: after a gap of any length the state reads as the formula
// says, with no aliasing of window numbers, through rebases.
func TestIdleGaps(t *testing.T) {
	for _, k := range kinds {
		p := mustParams(t, k.kind, 1_000_000, time.Millisecond) // the fewest index bits
		for _, mk := range twins {
			for _, gap := range []int64{1, 2, 1_000_000, p.maxRel, p.maxRel + 1, 2*p.maxRel + 3, 1 << 40} {
				s := mk.new(p, 0)
				ref := newModel(k.kind, p.limit, time.Millisecond)
				now := int64(time.Millisecond) - 1
				s.AllowN(now, 700_000)
				ref.allowN(now, 700_000)
				now += gap * int64(time.Millisecond) / 2
				for range 3 {
					got, live := s.AllowN(now, 400_000)
					for !live {
						s = mk.succ(s, now)
						got, live = s.AllowN(now, 400_000)
					}
					if want := ref.allowN(now, 400_000); got != want {
						t.Fatalf("%s %s gap %d half-windows: got %+v, want %+v", k.name, mk.name, gap, got, want)
					}
					now += int64(time.Millisecond) / 3
				}
			}
		}
	}
}

func TestRetireRefundPeek(t *testing.T) {
	const T = int64(time.Second)
	for _, k := range kinds {
		p := mustParams(t, k.kind, 3, time.Second)
		for _, mk := range twins {
			s := mk.new(p, 0)
			if !s.RetireIdle(0) {
				t.Fatalf("%s %s: a new state is idle", k.name, mk.name)
			}
			if _, live := s.AllowN(0, 1); live {
				t.Fatalf("%s %s: a retired state granted", k.name, mk.name)
			}
			s = mk.succ(s, 0)
			before, _ := s.Peek(10)
			s.AllowN(10, 2)
			if !s.Refund(10, 2) {
				t.Fatal("refund on a live state")
			}
			if after, _ := s.Peek(10); after != before {
				t.Fatalf("%s %s: after a refund Peek says %+v, before %+v", k.name, mk.name, after, before)
			}
			s.AllowN(10, 3)
			if s.RetireIdle(T+10) != (k.kind == Fixed) {
				t.Fatalf("%s %s: idle in the next window is %v for this kind", k.name, mk.name, k.kind == Fixed)
			}
			if k.kind == Sliding && !s.RetireIdle(2*T) {
				t.Fatalf("%s %s: idle two windows later", k.name, mk.name)
			}
			// A successor of an idle state stays closed to earlier windows.
			succ := mk.succ(s, 2*T)
			if d, _ := succ.AllowN(10, 1); d.Allowed {
				t.Fatalf("%s %s: the successor granted a reading from before the eviction", k.name, mk.name)
			}
			succ.Retire()
			if _, live := succ.Peek(0); live {
				t.Fatal("Retire left the state live")
			}
		}
	}
}

// TestConcurrentExact: a frozen clock, many goroutines, exactly N.
func TestConcurrentExact(t *testing.T) {
	for _, k := range kinds {
		p := mustParams(t, k.kind, 500, time.Second)
		for _, mk := range twins {
			s := mk.new(p, 7)
			var granted atomic.Int64
			var wg sync.WaitGroup
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 100 {
						if ok, _ := s.Take(7, 1); ok {
							granted.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if granted.Load() != 500 {
				t.Errorf("%s %s: granted %d, want 500", k.name, mk.name, granted.Load())
			}
		}
	}
}

// dec builds a Decision from its fields in order, for compact tables.
var dec = twintest.Dec
