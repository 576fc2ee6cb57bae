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
	if a := testing.AllocsPerRun(1000, func() { m.AllowN("k", 1) }); a != 0 {
		t.Fatalf("AllowN: %v allocations per admitted request", a)
	}
	if !m.AllowN("k", 1).Allowed {
		t.Fatal("the request was refused: the admitted path was not measured")
	}
	refusing := mustLimits(t,
		mustLimiter(t, Config{Rule: Rule{Limit: 1 << 40, Period: time.Hour}, Clock: clock}),
		mustLimiter(t, Config{Rule: Rule{Limit: 1, Period: time.Hour}, Clock: clock}))
	refusing.Allow("k")
	if a := testing.AllocsPerRun(1000, func() { refusing.AllowN("k", 1) }); a != 0 {
		t.Fatalf("%v allocations per refused request", a)
	}
}
