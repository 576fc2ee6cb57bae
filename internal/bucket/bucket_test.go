package bucket

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
)

// twin is what both implementations offer; the tests run every table
// against each.
type twin interface {
	AllowN(now, n int64) (Decision, bool)
	Peek(now int64) (Decision, bool)
	Take(now, n int64) (bool, bool)
	Refund(n int64) bool
	RetireIdle(now int64) bool
	Retire()
}

type maker struct {
	name string
	new  func(p Params, now int64) twin
}

// twins are the three implementations of one semantics: the lock-free
// bucket, its mutex twin, and the leaky-bucket meter written independently.
var twins = []maker{
	{"lockfree", func(p Params, now int64) twin { return New(p, now) }},
	{"mutex", func(p Params, now int64) twin { return NewMutex(p, now) }},
	{"leaky", func(p Params, now int64) twin { return NewLeakyMutex(p, now) }},
}

// successorOf replaces a retired state the way the registry does.
func successorOf(b twin, now int64) twin {
	switch bb := b.(type) {
	case *Bucket:
		return bb.Successor(now)
	case *MutexBucket:
		return bb.Successor(now)
	case *LeakyMutex:
		return bb.Successor(now)
	}
	panic("unknown twin")
}

func mustParams(t testing.TB, limit int64, period time.Duration, burst int64) Params {
	t.Helper()
	p, err := NewParams(limit, period, burst)
	if err != nil {
		t.Fatalf("NewParams(%d, %v, %d): %v", limit, period, burst, err)
	}
	return p
}

func TestBucketLayout(t *testing.T) {
	if got := unsafe.Sizeof(Bucket{}); got != 64 {
		t.Fatalf("Bucket is %d bytes; it must be 64 so that no two words share a cache line", got)
	}
	if off := unsafe.Offsetof(Bucket{}.next); off != 48 {
		t.Fatalf("the fields read by every decision end at %d, want 48", off)
	}
	p := mustParams(t, 1, time.Second, 0)
	lines := map[uintptr]bool{}
	offsets := map[uintptr]int{}
	live := make([]*Bucket, 0, 1000) // kept alive so that no address is reused
	for range 1000 {
		b := New(p, 0)
		live = append(live, b)
		addr := uintptr(unsafe.Pointer(b))
		if lines[addr/64] {
			t.Fatalf("two buckets' words share the cache line at %#x", addr/64*64)
		}
		lines[addr/64] = true
		offsets[addr%64]++
	}
	// Where the allocator puts 64-byte objects decides whether the 48 hot
	// bytes sit in one line; report it, since it is the runtime's choice.
	for off, n := range offsets {
		t.Logf("%d buckets at %d mod 64: hot fields in one line: %v", n, off, off+48 <= 64)
	}
	runtime.KeepAlive(live)
}

func TestNewParamsRejects(t *testing.T) {
	cases := []struct {
		limit  int64
		period time.Duration
		burst  int64
	}{
		{0, time.Second, 0},
		{-1, time.Second, 0},
		{10, 0, 0},
		{10, -time.Second, 0},
		{10, time.Second, -1},
		{2e9, time.Second, 0},               // faster than one token per ns
		{1, 1000 * 24 * time.Hour, 1 << 40}, // burst window of eons
		{1, time.Duration(math.MaxInt64), 2},
	}
	for _, c := range cases {
		if _, err := NewParams(c.limit, c.period, c.burst); err == nil {
			t.Errorf("NewParams(%d, %v, %d) = nil error, want one", c.limit, c.period, c.burst)
		}
	}
}

func TestNewParamsScale(t *testing.T) {
	cases := []struct {
		limit         int64
		period        time.Duration
		scale, interv int64
	}{
		{10, time.Second, 1, 100_000_000},
		{3, time.Second, 3, 1_000_000_000},  // 333333333⅓ ns, exact in thirds
		{7, time.Minute, 7, 60_000_000_000}, // exact in sevenths
		{1_000_000, 30 * 24 * time.Hour, 1, 2_592_000_000},
		{999_983, time.Millisecond, 8192, 8193}, // prime limit: rounded up to 1/8192 ns
	}
	for _, c := range cases {
		p := mustParams(t, c.limit, c.period, 0)
		if p.scale != c.scale || p.interval != c.interv {
			t.Errorf("%d per %v: scale %d interval %d, want %d and %d", c.limit, c.period, p.scale, p.interval, c.scale, c.interv)
		}
		// Whatever the scale, the interval is never shorter than exact and
		// at most one tick longer.
		exact := new(big.Rat).SetFrac64(int64(c.period), c.limit)
		got := new(big.Rat).SetFrac64(p.interval, p.scale)
		diff := new(big.Rat).Sub(got, exact)
		if diff.Sign() < 0 || diff.Cmp(big.NewRat(1, p.scale)) >= 0 {
			t.Errorf("%d per %v: interval %v ns, exact %v", c.limit, c.period, got, exact)
		}
	}
}

// TestTable runs one sequence of exact times and answers against both twins.
func TestTable(t *testing.T) {
	type step struct {
		at   time.Duration
		n    int64
		want Decision
	}
	// 10 per second, burst 3: one token every 100ms.
	steps := []step{
		{0, 1, dec(true, 3, 2, 0, 100*time.Millisecond)},
		{0, 2, dec(true, 3, 0, 0, 300*time.Millisecond)},
		{0, 1, dec(false, 3, 0, 100*time.Millisecond, 300*time.Millisecond)},
		{99 * time.Millisecond, 1, dec(false, 3, 0, time.Millisecond, 201*time.Millisecond)},
		{100 * time.Millisecond, 1, dec(true, 3, 0, 0, 300*time.Millisecond)},
		{150 * time.Millisecond, 4, dec(false, 3, 0, Never, 250*time.Millisecond)},
		{150 * time.Millisecond, 0, dec(false, 3, 0, Never, 250*time.Millisecond)},
		{150 * time.Millisecond, -5, dec(false, 3, 0, Never, 250*time.Millisecond)},
		{10 * time.Second, 3, dec(true, 3, 0, 0, 300*time.Millisecond)},
		{10*time.Second + 250*time.Millisecond, 2, dec(true, 3, 0, 0, 250*time.Millisecond)},
		// The clock moves back 1s: the bucket owes more, mints nothing;
		// the reading finds it 950ms past empty, 10 units owed rounded up.
		{9*time.Second + 250*time.Millisecond, 1, Decision{Limit: 3, RetryAfter: 1050 * time.Millisecond, ResetAfter: 1250 * time.Millisecond, Owed: 10}},
	}
	p := mustParams(t, 10, time.Second, 3)
	const origin = 1_000_000
	for _, m := range twins {
		b := m.new(p, origin)
		for i, s := range steps {
			got, live := b.AllowN(origin+int64(s.at), s.n)
			if !live || got != s.want {
				t.Errorf("%s step %d (at %v, n=%d): got %+v live=%v, want %+v", m.name, i, s.at, s.n, got, live, s.want)
			}
		}
	}
}

// model is the token bucket in exact rational arithmetic, the definition
// the buckets must match: continuous refill at rate, capped at capacity.
type model struct {
	capacity int64
	rate     *big.Rat // tokens per ns
	tokens   *big.Rat
	last     int64
}

func newModel(capacity int64, rate *big.Rat, now int64) *model {
	return &model{capacity: capacity, rate: rate, tokens: big.NewRat(capacity, 1), last: now}
}

func (m *model) at(now int64) *big.Rat {
	if now <= m.last {
		return new(big.Rat).Set(m.tokens)
	}
	tok := new(big.Rat).Mul(m.rate, big.NewRat(now-m.last, 1))
	tok.Add(tok, m.tokens)
	if tok.Cmp(big.NewRat(m.capacity, 1)) > 0 {
		tok.SetInt64(m.capacity)
	}
	return tok
}

func ceilDur(r *big.Rat) time.Duration {
	q, rem := new(big.Int).QuoRem(r.Num(), r.Denom(), new(big.Int))
	if rem.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return time.Duration(q.Int64())
}

func floorInt(r *big.Rat) int64 {
	q := new(big.Int).Div(r.Num(), r.Denom()) // Euclidean: floor for positive denominators
	return q.Int64()
}

// allowN is the model's answer; now never goes backwards here.
func (m *model) allowN(now, n int64) Decision {
	tok := m.at(now)
	m.tokens, m.last = tok, now
	d := Decision{Limit: m.capacity}
	capR := big.NewRat(m.capacity, 1)
	if n >= 1 && n <= m.capacity && tok.Cmp(big.NewRat(n, 1)) >= 0 {
		tok.Sub(tok, big.NewRat(n, 1))
		d.Allowed = true
	} else if n < 1 || n > m.capacity {
		d.RetryAfter = Never
	} else {
		need := new(big.Rat).Sub(big.NewRat(n, 1), tok)
		d.RetryAfter = ceilDur(need.Quo(need, m.rate))
	}
	d.Remaining = floorInt(tok)
	owed := new(big.Rat).Sub(capR, tok)
	d.ResetAfter = ceilDur(owed.Quo(owed, m.rate))
	return d
}

// TestExactAgainstRationalModel drives both twins and the rational model
// with random increasing times and costs; every Decision must be equal.
// For rules whose interval is rounded, the model runs at the rounded rate,
// and TestNewParamsScale bounds the rounding.
func TestExactAgainstRationalModel(t *testing.T) {
	rules := []struct {
		limit  int64
		period time.Duration
		burst  int64
	}{
		{10, time.Second, 0}, {10, time.Second, 3}, {3, time.Second, 5}, {7, time.Minute, 0},
		{1000, time.Millisecond, 1}, {1, time.Hour, 10}, {999_983, time.Millisecond, 0},
		{6, 7, 2}, {1_000_000, 30 * 24 * time.Hour, 0},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, rule := range rules {
		p := mustParams(t, rule.limit, rule.period, rule.burst)
		rate := big.NewRat(p.scale, p.interval)
		for _, m := range twins {
			now := int64(r.Uint64() >> 2)
			b := m.new(p, now)
			ref := newModel(p.capacity, rate, now)
			step := int64(rule.period) / rule.limit
			var allowed, denied int
			for i := range 3000 {
				switch r.IntN(4) {
				case 0:
				case 1:
					now += r.Int64N(step + 1)
				case 2:
					now += r.Int64N(3)
				case 3:
					now += r.Int64N(int64(rule.period)/max(1, rule.limit/4) + 1)
				}
				n := 1 + r.Int64N(min(p.capacity, 4))
				switch r.IntN(50) {
				case 0:
					n = p.capacity + 1
				case 1, 2:
					n = 1 + r.Int64N(p.capacity)
				}
				got, live := b.AllowN(now, n)
				want := ref.allowN(now, n)
				if !live || got != want {
					t.Fatalf("%d per %v burst %d, %s, step %d (n=%d): got %+v, want %+v",
						rule.limit, rule.period, rule.burst, m.name, i, n, got, want)
				}
				if got.Allowed {
					allowed++
				} else if got.RetryAfter != Never {
					denied++
				}
			}
			if allowed < 100 || denied < 100 {
				t.Errorf("%d per %v: %d allowed, %d denied: the sequence does not exercise both", rule.limit, rule.period, allowed, denied)
			}
		}
	}
}

// TestRebase carries a bucket's debt across the move of its origin: a key
// that is never full for longer than the rebase span keeps exact answers.
func TestRebase(t *testing.T) {
	p := mustParams(t, 3, time.Second, 0) // scale 3: rebase after 2^60/3 ns, ~12 years
	for _, m := range twins {
		var b twin = m.new(p, 0)
		now := int64(rebaseAt/p.scale) - int64(time.Second)
		ref := newModel(p.capacity, big.NewRat(p.scale, p.interval), now)
		rebased := 0
		for i := range 40 {
			d, live := b.AllowN(now, 1)
			if !live {
				rebased++
				b = successorOf(b, now)
				if d, live = b.AllowN(now, 1); !live {
					t.Fatalf("%s: the successor is retired too", m.name)
				}
			}
			if want := ref.allowN(now, 1); d != want {
				t.Fatalf("%s step %d at %d: got %+v, want %+v", m.name, i, now, d, want)
			}
			now += int64(time.Second) / 8
		}
		if rebased != 1 {
			t.Errorf("%s: rebased %d times, want once", m.name, rebased)
		}
	}
}

func TestFarClock(t *testing.T) {
	p := mustParams(t, 10, time.Second, 0)
	for _, m := range twins {
		b := m.new(p, 0)
		b.AllowN(0, 10)
		// Far in the past: denied, nothing taken, no panic.
		for _, now := range []int64{math.MinInt64, -(1 << 62)} {
			if d, live := b.AllowN(now, 1); !live || d.Allowed || d.RetryAfter != Never {
				t.Errorf("%s: AllowN at %d = %+v live=%v, want a Never denial", m.name, now, d, live)
			}
		}
		// Far in the future the bucket is full: it retires so that its
		// successor, with a new origin, answers.
		if _, live := b.AllowN(math.MaxInt64, 1); live {
			t.Errorf("%s: a bucket past its range must retire", m.name)
		}
		if d, live := b.Peek(0); live || d.Allowed {
			t.Errorf("%s: retired bucket answered Peek with %+v", m.name, d)
		}
	}
	b := New(p, 0)
	b.AllowN(0, 10)
	b.AllowN(math.MaxInt64, 1)
	s := b.Successor(math.MaxInt64)
	if d, live := s.AllowN(math.MaxInt64, 10); !live || !d.Allowed {
		t.Errorf("successor at the end of time: %+v live=%v, want a full bucket", d, live)
	}
}

func TestPeekRefundRetire(t *testing.T) {
	p := mustParams(t, 2, time.Second, 0)
	for _, m := range twins {
		b := m.new(p, 0)
		if b.RetireIdle(0) != true {
			t.Fatalf("%s: a fresh bucket is idle", m.name)
		}
		if _, live := b.AllowN(0, 1); live {
			t.Fatalf("%s: a retired bucket granted", m.name)
		}
		b = m.new(p, 0)
		before, _ := b.Peek(0)
		b.AllowN(0, 2)
		if b.RetireIdle(0) {
			t.Fatalf("%s: a bucket that owes tokens is not idle", m.name)
		}
		if !b.Refund(2) {
			t.Fatalf("%s: refund on a live bucket", m.name)
		}
		if after, _ := b.Peek(0); after != before {
			t.Fatalf("%s: after refund Peek = %+v, want %+v", m.name, after, before)
		}
		b.AllowN(0, 1)
		if b.RetireIdle(int64(time.Second/2) - 1) {
			t.Fatalf("%s: idle one ns early", m.name)
		}
		if !b.RetireIdle(int64(time.Second / 2)) {
			t.Fatalf("%s: full again after 500ms", m.name)
		}
		if b.Refund(1) {
			t.Fatalf("%s: a refund on a retired bucket belongs to its successor", m.name)
		}
		b = m.new(p, 0)
		b.AllowN(0, 2)
		b.Retire()
		if _, live := b.Peek(0); live {
			t.Fatalf("%s: Retire left the bucket live", m.name)
		}
	}
}

// TestConcurrentExact: many goroutines, a frozen clock, exactly capacity
// grants on each twin.
func TestConcurrentExact(t *testing.T) {
	p := mustParams(t, 1000, time.Second, 0)
	for _, m := range twins {
		b := m.new(p, 42)
		var granted atomic.Int64
		var wg sync.WaitGroup
		for range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 200 {
					if d, _ := b.AllowN(42, 1); d.Allowed {
						granted.Add(1)
					}
				}
			}()
		}
		wg.Wait()
		if granted.Load() != 1000 {
			t.Errorf("%s: granted %d, want exactly 1000", m.name, granted.Load())
		}
	}
}

// TestRefundFollowsRebase: a grant made before a rebase is refunded into the
// successor, the one state that carries it.
func TestRefundFollowsRebase(t *testing.T) {
	p := mustParams(t, 10, time.Second, 0)
	now := int64(rebaseAt) - int64(time.Millisecond)
	a := New(p, 0)
	m := NewMutex(p, 0)
	for _, b := range []twin{a, m} {
		if d, _ := b.AllowN(now, 10); !d.Allowed {
			t.Fatalf("first grant denied: %+v", d)
		}
		if _, live := b.AllowN(now+int64(2*time.Millisecond), 1); live {
			t.Fatalf("no rebase past %d", int64(rebaseAt))
		}
		if b.Refund(10) {
			t.Fatalf("refund on a rebased bucket must go to its successor")
		}
	}
	later := now + int64(2*time.Millisecond)
	sa, sm := a.Successor(later), m.Successor(later)
	if sa != a.Successor(later+5) || sm != m.Successor(later+5) {
		t.Fatalf("Successor must return the same state to every caller")
	}
	if !sa.Refund(10) || !sm.Refund(10) {
		t.Fatalf("refund into the successor failed")
	}
	for _, s := range []twin{sa, sm} {
		if d, _ := s.Peek(later); d.Remaining != 9 || !d.Allowed {
			t.Fatalf("after the refund the successor is full: got %+v", d)
		}
	}
}

// TestStaleReadings: a reading from before a bucket's origin, or from before
// the instant an idle bucket was retired, finds the state owing the
// difference: out-of-order clock reads never mint tokens.
func TestStaleReadings(t *testing.T) {
	p := mustParams(t, 10, time.Second, 1) // one token per 100ms, capacity 1
	for _, m := range twins {
		b := m.new(p, 1000)
		if d, _ := b.AllowN(990, 1); d.Allowed || d.RetryAfter != 10 {
			t.Fatalf("%s: 10ns before a new bucket's origin: %+v", m.name, d)
		}
		if d, _ := b.AllowN(1000, 1); !d.Allowed {
			t.Fatalf("%s: at the origin the bucket is full: %+v", m.name, d)
		}
		idleAt := int64(1000 + 500*time.Millisecond)
		if !b.RetireIdle(idleAt) {
			t.Fatalf("%s: full after 500ms", m.name)
		}
		s := successorOf(b, idleAt+7)
		if d, _ := s.AllowN(idleAt-int64(time.Millisecond), 1); d.Allowed || d.RetryAfter != time.Millisecond {
			t.Fatalf("%s: a reading from before the eviction finds the successor full: %+v", m.name, d)
		}
		if d, _ := s.AllowN(idleAt, 1); !d.Allowed {
			t.Fatalf("%s: the successor is full from the eviction on: %+v", m.name, d)
		}
	}
}

// dec builds a Decision from its fields in order, for compact tables.
func dec(allowed bool, limit, remaining int64, retryAfter, resetAfter time.Duration) Decision {
	return Decision{Allowed: allowed, Limit: limit, Remaining: remaining, RetryAfter: retryAfter, ResetAfter: resetAfter}
}
