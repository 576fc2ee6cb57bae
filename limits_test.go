package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/testhook"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// mustLimiter builds cfg's Limiter, whose Algorithm may name a mutex twin
// (internal/hook's names).
func mustLimiter(t testing.TB, cfg Config) *Limiter {
	t.Helper()
	cfg.twins = true
	l, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func mustLimits(t testing.TB, ls ...*Limiter) *Limits {
	t.Helper()
	m, err := NewLimits(ls...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLimitsAllOrNothing: on a frozen clock, 5 an hour and 3 an hour admit
// exactly 3, in either order, and the looser rule is left holding 2: the
// grants it made for refused requests were given back.
func TestLimitsAllOrNothing(t *testing.T) {
	for _, order := range []string{"loose first", "strict first"} {
		t.Run(order, func(t *testing.T) {
			clock := NewManualClock(0)
			loose := mustLimiter(t, Config{Rule: Rule{Limit: 5, Period: time.Hour}, Clock: clock, Stats: true})
			strict := mustLimiter(t, Config{Rule: Rule{Limit: 3, Period: time.Hour}, Clock: clock, Stats: true})
			m := mustLimits(t, loose, strict)
			if order == "strict first" {
				m = mustLimits(t, strict, loose)
			}
			passed := 0
			for range 10 {
				if m.Allow("k") {
					passed++
				}
			}
			if passed != 3 {
				t.Fatalf("admitted %d, want 3", passed)
			}
			// Peek answers for one more request: Remaining is what is left after it.
			if r := loose.Peek("k").Remaining; r != 1 {
				t.Fatalf("the looser rule would leave %d, want 1: refused requests kept its grants", r)
			}
			if r := strict.Peek("k").Remaining; r != 0 {
				t.Fatalf("the strict rule holds %d, want 0", r)
			}
			if s := loose.Stats(); s.Allowed != 3 || s.Denied != 7 && order == "loose first" {
				t.Fatalf("the looser rule counted %d allowed, %d denied; want 3 and 7", s.Allowed, s.Denied)
			}
		})
	}
}

// TestLimitsDecisions: an admission reports the rule with the fewest
// requests left; a refusal reports the refusing rule, and Decide gives
// every rule's own answer.
func TestLimitsDecisions(t *testing.T) {
	clock := NewManualClock(0)
	perSecond := mustLimiter(t, Config{Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock})
	perHour := mustLimiter(t, Config{Rule: Rule{Limit: 3, Period: time.Hour}, Clock: clock})
	m := mustLimits(t, perSecond, perHour)
	each := make([]Decision, 2)
	d, _ := m.Decide("k", 1, each)
	if !d.Allowed || d.Limit != 3 || d.Remaining != 2 {
		t.Fatalf("first request: %+v, want the hourly rule's (limit 3, remaining 2)", d)
	}
	if each[0].Limit != 10 || each[0].Remaining != 9 || each[1].Limit != 3 || each[1].Remaining != 2 {
		t.Fatalf("each: %+v", each)
	}
	m.Allow("k")
	m.Allow("k")
	d, _ = m.Decide("k", 1, each)
	if d.Allowed || d.Limit != 3 || d.RetryAfter != 20*time.Minute {
		t.Fatalf("fourth request: %+v, want the hourly rule's refusal, retry in 20m", d)
	}
	if each[1] != d {
		t.Fatalf("each[1] = %+v, want the refusal %+v", each[1], d)
	}
	if !each[0].Allowed || each[0].Remaining != 6 {
		t.Fatalf("each[0] = %+v, want the per-second rule's Peek after its refund (7 left before one more)", each[0])
	}
	// A short slice gets the first answers; a long one is not written past Len.
	short := make([]Decision, 1)
	m.Decide("k", 1, short)
	if short[0].Limit != 10 {
		t.Fatalf("short[0] = %+v", short[0])
	}
	long := make([]Decision, 3)
	m.Decide("k", 1, long)
	if long[2] != (Decision{}) {
		t.Fatalf("long[2] written: %+v", long[2])
	}
	// The deprecated forms answer as Decide does.
	if d, _ := m.Decide("k", 1, nil); m.AllowEach("k", 1, nil) != d || m.Len() != 2 {
		t.Fatal("AllowEach or Len differs from Decide and NewLimits")
	}
}

// TestLimitsRefundGlobal: a refused request gives back the global cap's
// unit too.
func TestLimitsRefundGlobal(t *testing.T) {
	clock := NewManualClock(0)
	capped := mustLimiter(t, Config{Rule: Rule{Limit: 100, Period: time.Hour},
		Global: &Rule{Limit: 3, Period: time.Hour}, Clock: clock})
	one := mustLimiter(t, Config{Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock})
	m := mustLimits(t, capped, one)
	for range 5 {
		m.Allow("x")
	}
	passed := 0
	for range 3 {
		if capped.Allow("y") {
			passed++
		}
	}
	if passed != 2 {
		t.Fatalf("the global cap had %d left, want 2: refused requests kept its units", passed)
	}
}

// TestLimitsConcurrent: many goroutines on one key, every algorithm as the
// looser rule: exactly the stricter rule's burst passes, and the looser
// rule consumed exactly that, but for the sliding log, whose refunds may
// be dropped under concurrency (it is then charged for refused requests,
// never the reverse).
func TestLimitsConcurrent(t *testing.T) {
	for _, alg := range []string{TokenBucket, LeakyBucket, FixedWindow, SlidingCounter, SlidingLog, testhook.TokenBucketMutex} {
		t.Run(alg, func(t *testing.T) {
			clock := NewManualClock(0)
			loose := mustLimiter(t, Config{Algorithm: alg, Rule: Rule{Limit: 100, Period: time.Hour}, Clock: clock})
			strict := mustLimiter(t, Config{Rule: Rule{Limit: 50, Period: time.Hour}, Clock: clock})
			m := mustLimits(t, loose, strict)
			var passed atomic.Int64
			var wg sync.WaitGroup
			for range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						if m.Allow("hot") {
							passed.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if got := passed.Load(); got != 50 {
				t.Fatalf("admitted %d, want 50", got)
			}
			r := loose.Peek("hot").Remaining
			if alg == SlidingLog {
				if r > 49 {
					t.Fatalf("the sliding log would leave %d, above 49: a refund was doubled", r)
				}
			} else if r != 49 {
				t.Fatalf("the looser rule would leave %d after one more, want 49", r)
			}
		})
	}
}

// TestNewLimitsErrors: none, a nil one, or too many are errors.
func TestNewLimitsErrors(t *testing.T) {
	l := mustLimiter(t, Config{Rule: Rule{Limit: 1, Period: time.Second}})
	nine := make([]*Limiter, 9)
	for i := range nine {
		nine[i] = l
	}
	for name, ls := range map[string][]*Limiter{"none": nil, "nil": {l, nil}, "nine": nine} {
		if _, err := NewLimits(ls...); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestLimitsAllocatesNothing: on existing keys, Limits allocate nothing,
// admitted or refused.
func TestLimitsAllocatesNothing(t *testing.T) {
	clock := NewManualClock(0)
	m := mustLimits(t,
		mustLimiter(t, Config{Rule: Rule{Limit: 1 << 40, Period: time.Hour}, Clock: clock}),
		mustLimiter(t, Config{Rule: Rule{Limit: 1 << 40, Period: time.Hour}, Clock: clock}))
	m.Allow("k")
	each := make([]Decision, 2)
	if a := testing.AllocsPerRun(1000, func() { m.Decide("k", 1, each) }); a != 0 {
		t.Fatalf("%v allocations per admitted request", a)
	}
	refusing := mustLimits(t,
		mustLimiter(t, Config{Rule: Rule{Limit: 1 << 40, Period: time.Hour}, Clock: clock}),
		mustLimiter(t, Config{Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock}))
	refusing.Allow("k")
	if a := testing.AllocsPerRun(1000, func() { refusing.AllowN("k", 1) }); a != 0 {
		t.Fatalf("%v allocations per refused request", a)
	}
}

// TestLimitsDecideTo: DecideTo writes the answers Decide reports and
// names the same refusing Limiter, on two twin Limits driven by the same
// random requests (costs 1 to 3, time moving on), with each of every
// length; a full each is written in place, with no allocation.
func TestLimitsDecideTo(t *testing.T) {
	clock := NewManualClock(0)
	build := func() *Limits {
		return mustLimits(t,
			mustLimiter(t, Config{Rule: Rule{Limit: 10, Period: time.Second}, Clock: clock}),
			mustLimiter(t, Config{Algorithm: FixedWindow, Rule: Rule{Limit: 25, Period: 5 * time.Second}, Clock: clock}),
			mustLimiter(t, Config{Algorithm: SlidingLog, Rule: Rule{Limit: 40, Period: 10 * time.Second}, Clock: clock}))
	}
	a, b := build(), build()
	refused := 0
	for i := range 3000 {
		n := int64(1 + i%3)
		key := []string{"x", "y"}[i%2]
		got := make([]Decision, i%5) // 0 to 4 entries
		want := make([]Decision, len(got))
		wd, wj := a.Decide(key, n, want)
		j := b.DecideTo(key, n, got)
		if j != wj {
			t.Fatalf("request %d: DecideTo named %d, Decide %d", i, j, wj)
		}
		for k := range got {
			if got[k] != want[k] {
				t.Fatalf("request %d: each[%d] = %+v, Decide's %+v", i, k, got[k], want[k])
			}
		}
		if j >= 0 {
			refused++
			if j < len(got) && got[j] != wd {
				t.Fatalf("request %d: each[%d] = %+v, the refusal is %+v", i, j, got[j], wd)
			}
		}
		clock.Advance(time.Duration(i%7) * 20 * time.Millisecond)
	}
	if refused == 0 || refused == 3000 {
		t.Fatalf("%d of 3000 refused: the test exercised one path only", refused)
	}
	each := make([]Decision, 3)
	if n := testing.AllocsPerRun(1000, func() { b.DecideTo("z", 1, each) }); n != 0 {
		t.Fatalf("DecideTo allocated %v times a request", n)
	}
}

// TestDecideAll: asks on several Limiters with keys of their own are all
// or nothing. A request refused by one ask leaves every other ask's key
// as it was, and each ask's answer is reported in order.
func TestDecideAll(t *testing.T) {
	clock := NewManualClock(0)
	a := mustLimiter(t, Config{Algorithm: FixedWindow, Rule: Rule{Limit: 10, Period: time.Hour}, Clock: clock})
	b := mustLimiter(t, Config{Algorithm: TokenBucket, Rule: Rule{Limit: 4, Period: time.Hour}, Clock: clock})
	asks := []Ask{{a, "x", 3}, {b, "y", 2}}
	each := make([]Decision, 2)
	for i, want := range []int{-1, -1, 1, 1} {
		if got := DecideAll(asks, each); got != want {
			t.Fatalf("request %d: refused by %d, want %d", i, got, want)
		}
	}
	// Two admitted: a holds 4 of 10, b holds 0 of 4; refusals charged none.
	if each[0].Remaining != 3 || !each[0].Allowed {
		t.Fatalf("a's answer after the refusal: %+v, want its Peek (allowed, 3 left after one more)", each[0])
	}
	if each[1].Allowed || each[1].Remaining != 0 {
		t.Fatalf("b's answer: %+v, want refused with none left", each[1])
	}
	if r := a.Peek("x").Remaining; r != 3 {
		t.Fatalf("a would leave %d after one more, want 3: the refused requests kept a's grants", r)
	}
	// Other keys are untouched, and the same Limiter may appear twice.
	same := []Ask{{a, "z", 6}, {a, "z", 5}}
	if got := DecideAll(same, each); got != 1 {
		t.Fatalf("6 then 5 of 10 on one key: refused by %d, want 1", got)
	}
	if r := a.Peek("z").Remaining; r != 9 {
		t.Fatalf("z would leave %d after one more, want 9: the first ask was not given back", r)
	}
	if got := DecideAll([]Ask{{a, "z", 6}, {a, "z", 4}}, nil); got != -1 {
		t.Fatalf("6 then 4 of 10: refused by %d, want -1", got)
	}
}

// TestDecideAllBadAsks: a nil Limiter, a cost below 1 or above the
// capacity is refused, gives back what the asks before it took, and
// panics nowhere; each names it with RetryAfter Never.
func TestDecideAllBadAsks(t *testing.T) {
	clock := NewManualClock(0)
	a := mustLimiter(t, Config{Rule: Rule{Limit: 10, Period: time.Hour}, Clock: clock})
	for name, bad := range map[string]Ask{"nil Limiter": {nil, "k", 1}, "zero": {a, "k", 0}, "negative": {a, "k", -5}, "past capacity": {a, "k", 11}} {
		each := make([]Decision, 3)
		asks := []Ask{{a, "k", 2}, bad, {nil, "after", 1}}
		if got := DecideAll(asks, each); got != 1 {
			t.Fatalf("%s: refused by %d, want 1", name, got)
		}
		if each[1].Allowed || each[1].RetryAfter != Never {
			t.Fatalf("%s: answer %+v, want refused with RetryAfter Never", name, each[1])
		}
		if each[2].RetryAfter != Never {
			t.Fatalf("%s: the nil Limiter after it answered %+v", name, each[2])
		}
		if r := a.Peek("k").Remaining; r != 9 {
			t.Fatalf("%s: k would leave %d after one more, want 9", name, r)
		}
	}
	if got := DecideAll(nil, nil); got != -1 {
		t.Fatalf("no asks: %d, want -1", got)
	}
}

// TestDecideAllMany: past the asks kept on the stack, a refusal at the
// last still gives back every one before it.
func TestDecideAllMany(t *testing.T) {
	clock := NewManualClock(0)
	a := mustLimiter(t, Config{Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock})
	asks := make([]Ask, 40)
	for i := range asks {
		asks[i] = Ask{a, string(rune('A' + i)), 1}
	}
	asks[39].Key = "A" // already taken by the first ask
	if got := DecideAll(asks, nil); got != 39 {
		t.Fatalf("refused by %d, want 39", got)
	}
	for i := range 39 {
		if !a.Peek(asks[i].Key).Allowed {
			t.Fatalf("key %q kept its grant", asks[i].Key)
		}
	}
}

// TestDecideAllConcurrent: 64 goroutines send two kinds of request on a
// frozen clock, {x of A, y of B} and {x of A} alone, for every algorithm
// and twin as A. B admits exactly its 60; A exactly its 100 in all; and
// y's state shows exactly the pairs admitted, so no refused pair kept a
// charge anywhere (but for the sliding log, charged for a refusal at
// worst, never the reverse).
func TestDecideAllConcurrent(t *testing.T) {
	for _, alg := range []string{TokenBucket, testhook.TokenBucketMutex, LeakyBucket, FixedWindow, SlidingCounter, SlidingLog, testhook.SlidingLogMutex} {
		t.Run(alg, func(t *testing.T) {
			clock := NewManualClock(0)
			a := mustLimiter(t, Config{Algorithm: alg, Rule: Rule{Limit: 100, Period: time.Hour}, Clock: clock})
			b := mustLimiter(t, Config{Algorithm: FixedWindow, Rule: Rule{Limit: 60, Period: time.Hour}, Clock: clock})
			pair := []Ask{{a, "x", 1}, {b, "y", 1}}
			alone := []Ask{{a, "x", 1}}
			var pairs, singles atomic.Int64
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 40 {
						if (g+i)%3 != 0 {
							if DecideAll(pair, nil) < 0 {
								pairs.Add(1)
							}
						} else if DecideAll(alone, nil) < 0 {
							singles.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			if p := pairs.Load(); p > 60 {
				t.Fatalf("B admitted %d pairs, above its 60", p)
			}
			if got := pairs.Load() + singles.Load(); got != 100 && !(alg == SlidingLog || alg == testhook.SlidingLogMutex) {
				t.Fatalf("A admitted %d in all, want exactly 100", got)
			} else if got > 100 {
				t.Fatalf("A admitted %d in all, above 100", got)
			}
			left := int64(0)
			if d := b.Peek("y"); d.Allowed {
				left = d.Remaining + 1
			}
			if left != 60-pairs.Load() {
				t.Fatalf("y holds %d, want %d: a refused pair kept its charge", left, 60-pairs.Load())
			}
		})
	}
}

// TestDecideAllAllocatesNothing: up to 16 asks on existing keys, nothing
// is allocated, admitted or refused.
func TestDecideAllAllocatesNothing(t *testing.T) {
	clock := NewManualClock(0)
	big := mustLimiter(t, Config{Rule: Rule{Limit: 1 << 40, Period: time.Hour}, Clock: clock})
	small := mustLimiter(t, Config{Algorithm: FixedWindow, Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock})
	asks := make([]Ask, 16)
	for i := range asks {
		asks[i] = Ask{big, "k", 1}
	}
	each := make([]Decision, 16)
	if a := testing.AllocsPerRun(1000, func() { DecideAll(asks, each) }); a != 0 {
		t.Fatalf("admitted: %v allocations a call, want 0", a)
	}
	asks[15] = Ask{small, "s", 1}
	DecideAll(asks, each)
	if a := testing.AllocsPerRun(1000, func() { DecideAll(asks, each) }); a != 0 {
		t.Fatalf("refused: %v allocations a call, want 0", a)
	}
}
