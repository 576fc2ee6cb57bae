package shardlog

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/chaos"
	"github.com/floodgate-go/floodgate/internal/twintest"
)

type twin = twintest.Twin

var dec = twintest.Dec

type logMaker struct {
	name string
	new  func(p Params, now int64) twin
	succ func(s twin, now int64) twin
}

func logMakers(t testing.TB) []logMaker {
	makers := []logMaker{{"mutex",
		func(p Params, now int64) twin { return NewMutex(p, now) },
		func(s twin, now int64) twin { return s.(*MutexLog).Successor(now) }}}
	if lockFreeLog {
		makers = append(makers, logMaker{"lockfree",
			func(p Params, now int64) twin { return New(p, now) },
			func(s twin, now int64) twin { return s.(*Log).Successor(now) }})
	} else {
		t.Log("no 16-byte CAS here: only the mutex log runs")
	}
	return makers
}

func mustParams(t testing.TB, limit int64, period time.Duration) Params {
	t.Helper()
	p, err := NewParams(limit, period)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestNewParams(t *testing.T) {
	for _, bad := range []struct {
		limit  int64
		period time.Duration
	}{{0, time.Second}, {-1, time.Second}, {10, 0}, {maxLogLimit + 1, time.Second}} {
		if _, err := NewParams(bad.limit, bad.period); err == nil {
			t.Errorf("NewParams(%d, %v) accepted", bad.limit, bad.period)
		}
	}
	mustParams(t, 1_000_000, 30*24*time.Hour)
	mustParams(t, 1, time.Millisecond)
}

func TestLogAfter(t *testing.T) {
	p := mustParams(t, 1, 10)
	cases := []struct {
		ts, t int64
		want  time.Duration
	}{
		{0, 0, 10}, {0, 5, 5}, {0, 10, 0}, {0, 99, 0}, {5, 0, 15},
		{math.MaxInt64, math.MinInt64, Never}, {math.MinInt64, math.MaxInt64, 0},
		{math.MaxInt64 - 3, math.MaxInt64, 7},
	}
	for _, c := range cases {
		if got := p.after(c.ts, c.t); got != c.want {
			t.Errorf("after(%d, %d) = %v, want %v", c.ts, c.t, got, c.want)
		}
	}
}

func TestLogTable(t *testing.T) {
	const T = int64(time.Second)
	steps := []struct {
		at, n int64
		want  Decision
	}{
		{0, 2, dec(true, 3, 1, 0, time.Second)},
		{T / 2, 1, dec(true, 3, 0, 0, time.Second)},
		{T / 2, 1, dec(false, 3, 0, time.Second/2, time.Second)},
		{T - 1, 1, dec(false, 3, 0, 1, time.Second/2+1)},
		// At T the first entry (cost 2) leaves: room for 2.
		{T, 2, dec(true, 3, 0, 0, time.Second)},
		{T, 4, dec(false, 3, 0, Never, time.Second)},
		// A reading from the past is charged at the newest entry's time.
		// The wait runs until the entry at T/2 leaves, at 3T/2.
		{T / 4, 1, dec(false, 3, 0, time.Second*5/4, time.Second*7/4)},
		{3 * T, 3, dec(true, 3, 0, 0, time.Second)},
	}
	p := mustParams(t, 3, time.Second)
	for _, m := range logMakers(t) {
		s := m.new(p, 0)
		for i, st := range steps {
			got, live := s.AllowN(st.at, st.n)
			if !live || got != st.want {
				t.Errorf("%s step %d (at %v, n=%d): got %+v, want %+v", m.name, i, time.Duration(st.at), st.n, got, st.want)
			}
		}
	}
}

// TestLogDifferential drives the lock-free log and its twin with the same
// random sequences — bursts that grow the ring, gaps that shrink it,
// readings from the past, weighted costs, refunds, peeks — and requires the
// same answer at every step. It also checks the log's invariant over the
// charged times: no window of length T holds more than N.
func TestLogDifferential(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	r := rand.New(rand.NewPCG(21, 22))
	// pace stretches the time between requests: at 1, demand is about
	// twelve times the limit and the window is mostly full; at 8 it is
	// mostly not, and Take's grants find room without a search.
	for _, rule := range []struct {
		limit  int64
		period time.Duration
		pace   int64
	}{{1, 10, 1}, {3, time.Second, 1}, {64, time.Millisecond, 1}, {1000, time.Second, 1}, {7, 3, 1},
		{64, time.Millisecond, 8}, {1000, time.Second, 8}, {2, 5, 8}} {
		p := mustParams(t, rule.limit, rule.period)
		T := int64(rule.period)
		now := r.Int64N(1<<40) - 1<<39
		a, m := New(p, now), NewMutex(p, now)
		type admitted struct{ ts, n int64 }
		var log []admitted // each admission at its charged time, refunds applied
		last := now
		var allowed, denied int
		for i := range 20_000 {
			switch op := r.IntN(100); {
			case op < 50:
				now += r.Int64N(rule.pace*T/rule.limit + 2)
			case op < 52:
				now += r.Int64N(3 * T)
			case op < 55:
				now -= r.Int64N(T/2 + 1)
			}
			n := 1 + r.Int64N(min(rule.limit, 5))
			if r.IntN(30) == 0 {
				n = rule.limit + 1 - r.Int64N(2)
			}
			if i%97 == 0 {
				// Hints may lag by laps (a claimant can be descheduled
				// before it moves them): the log must find its head and
				// boundary from any hint at or below them.
				a.ring.Load().hint.Store(1)
				a.ring.Load().tail.Store(0)
				a.head.Store(guess(1, a.ring.Load().mask))
			}
			if i%89 == 0 {
				// A stale claimant can leave a guess ahead of the head,
				// made on another ring of the same size: the log must
				// fall back to the ring's own hint.
				a.head.Store(guess(uint64(r.Int64N(1<<30)), a.ring.Load().mask))
			}
			switch r.IntN(10) {
			case 0:
				da, la := a.Peek(now)
				dm, lm := m.Peek(now)
				if da != dm || la != lm {
					t.Fatalf("%d per %v step %d Peek at %d: lock-free %+v, mutex %+v", rule.limit, rule.period, i, now, da, dm)
				}
				continue
			case 1:
				if a.Refund(now, n) != m.Refund(now, n) {
					t.Fatalf("step %d: Refund differs", i)
				}
				if k := len(log) - 1; k >= 0 && log[k].ts == now && log[k].n == n {
					log[k].n = 0
				}
				continue
			}
			dm, lm := m.AllowN(now, n)
			da, la := dm, lm
			if r.IntN(2) == 0 {
				da, la = a.AllowN(now, n)
			} else if ok, live := a.Take(now, n); ok != dm.Allowed || live != lm {
				t.Fatalf("%d per %v step %d Take(%d, %d): lock-free %v %v, mutex %+v %v", rule.limit, rule.period, i, now, n, ok, live, dm, lm)
			}
			if da != dm || !la || !lm {
				t.Fatalf("%d per %v step %d AllowN(%d, %d): lock-free %+v, mutex %+v", rule.limit, rule.period, i, now, n, da, dm)
			}
			if da.Allowed {
				allowed++
				last = max(last, now)
				log = append(log, admitted{last, n})
			} else if da.RetryAfter != Never {
				denied++
			}
		}
		// No window (x−T, x] holds more than N admitted units.
		var charged []int64
		for _, e := range log {
			for range e.n {
				charged = append(charged, e.ts)
			}
		}
		for i, j := 0, 0; j < len(charged); j++ {
			for charged[j]-charged[i] >= T {
				i++
			}
			if int64(j-i+1) > rule.limit {
				t.Fatalf("%d per %v: %d units in a window ending at %d", rule.limit, rule.period, j-i+1, charged[j])
			}
		}
		if allowed < 100 || denied < 100 {
			t.Errorf("%d per %v: %d allowed, %d denied: not both exercised", rule.limit, rule.period, allowed, denied)
		}
	}
}

// TestLogMemory: the ring grows to hold a saturated window and shrinks
// again once the traffic thins; it never holds more than the power of two
// above N+1 entries.
func TestLogMemory(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	const N = 1000
	p := mustParams(t, N, time.Second)
	l := New(p, 0)
	now := int64(0)
	for range 3 * N {
		l.AllowN(now, 1)
		now += int64(time.Millisecond) / 2
	}
	if c := int(l.ring.Load().capacity()); c < N || c > 2048 {
		t.Fatalf("after a saturated window the ring holds %d slots, want between %d and 2048", c, N)
	}
	for range 200 { // one request every 50ms: at most 20 in a window
		now += int64(50 * time.Millisecond)
		l.AllowN(now, 1)
	}
	if c := int(l.ring.Load().capacity()); c > 128 {
		t.Fatalf("after the traffic thinned the ring still holds %d slots", c)
	}
}

// TestLogRefundStorm: a key whose every grant is refunded (a global cap
// that refuses all) must not swell its log.
func TestLogRefundStorm(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	l := New(mustParams(t, 10, time.Hour), 0)
	for i := range 100_000 {
		now := int64(i)
		if d, _ := l.AllowN(now, 1); !d.Allowed {
			t.Fatalf("request %d refused though every grant was refunded: %+v", i, d)
		}
		l.Refund(now, 1)
	}
	if c := int(l.ring.Load().capacity()); c > 32 {
		t.Fatalf("100,000 refunded grants left a ring of %d slots", c)
	}
}

func TestLogRetire(t *testing.T) {
	p := mustParams(t, 2, time.Second)
	for _, m := range logMakers(t) {
		s := m.new(p, 0)
		if !s.RetireIdle(0) {
			t.Fatalf("%s: a new log is idle", m.name)
		}
		if _, live := s.AllowN(0, 1); live {
			t.Fatalf("%s: a retired log granted", m.name)
		}
		s = m.succ(s, 5)
		s.AllowN(10, 2)
		if s.RetireIdle(10 + int64(time.Second) - 1) {
			t.Fatalf("%s: idle while an entry is in the window", m.name)
		}
		idle := 10 + int64(time.Second)
		if !s.RetireIdle(idle) {
			t.Fatalf("%s: not idle once the entry left", m.name)
		}
		succ := m.succ(s, idle+100)
		if d, _ := succ.AllowN(idle-1, 2); !d.Allowed || d.ResetAfter != time.Second+1 {
			t.Fatalf("%s: a reading from before the eviction is charged at the eviction: %+v", m.name, d)
		}
		succ.Retire()
		if _, live := succ.Peek(0); live {
			t.Fatalf("%s: Retire left the log live", m.name)
		}
		if fresh := m.succ(succ, 77); fresh != m.succ(succ, 78) {
			t.Fatalf("%s: Successor must return one log", m.name)
		}
	}
}

// TestLogConcurrentExact: a frozen clock, many goroutines, weighted costs:
// the admitted cost is exactly N.
func TestLogConcurrentExact(t *testing.T) {
	p := mustParams(t, 5000, time.Second)
	for _, m := range logMakers(t) {
		s := m.new(p, 3)
		var cost atomic.Int64
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 400 {
					n := int64(1 + (g+i)%4)
					if ok, _ := s.Take(3, n); ok {
						cost.Add(n)
					}
				}
			}()
		}
		wg.Wait()
		if cost.Load() != 5000 {
			t.Errorf("%s: admitted cost %d, want 5000", m.name, cost.Load())
		}
	}
}

// TestLogLostClaims: a claim that loses its CAS carries on, on both of
// Take's paths, the one-entry claim and decide's, a call that loses twice
// steps aside and reads the log afresh, and the log stays exact. Under
// -tags chaos, which yields between every read and its CAS, each path
// must have been taken at least once, or the test proved nothing.
func TestLogLostClaims(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(8, 4*runtime.NumCPU())))
	sites := []string{"log.claim", "log.step", "log.stepaside"}
	before := map[string]int64{}
	for _, s := range sites {
		before[s] = chaos.RetriesAt(s)
	}
	const limit = 1000
	l := New(mustParams(t, limit, time.Second), 0)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range 200 {
				if ok, _ := l.Take(int64(i), 1); ok {
					admitted.Add(1)
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if admitted.Load() != limit {
		t.Fatalf("admitted %d in one window, want exactly %d", admitted.Load(), limit)
	}
	for _, s := range sites {
		lost := chaos.RetriesAt(s) - before[s]
		if chaos.Enabled && lost == 0 {
			t.Errorf("nothing at %s: the test did not reach that path", s)
		}
		t.Logf("%s: %d (lost CASes, or step-asides; counted only with -tags chaos)", s, lost)
	}
}

// TestLogGuessFollowsHead checks that claims from one goroutine keep the
// head guess exact, through Take and AllowN, the window's growth and its
// shrinking: each such claim then reads the head's slot and no other. It
// fails if a claim moves the guess only now and then.
func TestLogGuessFollowsHead(t *testing.T) {
	if !lockFreeLog {
		t.Skip("no 16-byte CAS on this machine")
	}
	p := mustParams(t, 1000, time.Millisecond)
	l := New(p, 0)
	now, grew, shrank, size := int64(0), 0, 0, l.ring.Load().capacity()
	for i := range 3000 {
		// Claims 10µs apart, then as many 400µs apart: the ring grows
		// in the dense phase and shrinks in the sparse one.
		now += 10_000
		if i/300%2 == 1 {
			now += 390_000
		}
		if i%3 == 0 {
			if d, _ := l.AllowN(now, 1); !d.Allowed {
				t.Fatalf("claim %d denied: the window holds room", i)
			}
		} else if ok, _ := l.Take(now, 1); !ok {
			t.Fatalf("claim %d denied: the window holds room", i)
		}
		v, ok := l.look()
		if !ok {
			t.Fatalf("claim %d: the view moved with no other goroutine", i)
		}
		if want, g := guess(v.h, v.r.mask), l.head.Load(); g != want {
			t.Fatalf("claim %d: guess is index %d on a ring of 2^%d, want the head %d on 2^%d",
				i, g>>6, g&63, v.h, want&63)
		}
		if c := v.r.capacity(); c > size {
			grew++
			size = c
		} else if c < size {
			shrank++
			size = c
		}
	}
	if grew == 0 || shrank == 0 {
		t.Fatalf("the ring grew %d times and shrank %d: the test must see both", grew, shrank)
	}
}

// TestRingRefTag checks that a Log's ring reference gives back the ring
// and its mask for every capacity up to 2^16, and that the largest ring
// maxLogLimit allows leaves the tag below ringAlign.
func TestRingRefTag(t *testing.T) {
	if top := bits.Len64(2 * (maxLogLimit + 2)); top >= ringAlign {
		t.Fatalf("a ring of 2^%d entries would not fit ringRef's tag", top)
	}
	for c := uint64(minRing); c <= 1<<16; c *= 2 {
		r := newRing(c)
		var rr ringRef
		rr.Store(r)
		got, mask := rr.loadMask()
		if got != r || mask != c-1 || rr.Load() != r {
			t.Fatalf("capacity %d: got ring %p mask %d, want %p %d", c, got, mask, r, c-1)
		}
		if !rr.CompareAndSwap(r, newRing(c*2)) || rr.CompareAndSwap(r, r) {
			t.Fatalf("capacity %d: CompareAndSwap did not tell the ring from another", c)
		}
	}
}
