package atomicbucket_test

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/atomicbucket"
)

var start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newBucket(t *testing.T, limit int64, period time.Duration, burst int64) *atomicbucket.Bucket {
	t.Helper()
	b, err := atomicbucket.New(limit, period, burst, start)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestNewRejectsBadRules(t *testing.T) {
	for _, c := range []struct {
		name   string
		limit  int64
		period time.Duration
		burst  int64
	}{
		{"zero limit", 0, time.Second, 0},
		{"negative limit", -1, time.Second, 0},
		{"zero period", 1, 0, 0},
		{"negative period", 1, -time.Second, 0},
		{"negative burst", 1, time.Second, -1},
		{"above one a nanosecond", 2, time.Nanosecond, 0},
		{"burst window too long", 1, time.Duration(math.MaxInt64), math.MaxInt64},
	} {
		b, err := atomicbucket.New(c.limit, c.period, c.burst, start)
		if err == nil || b != nil {
			t.Errorf("%s: New(%d, %v, %d) = %v, %v; want an error", c.name, c.limit, c.period, c.burst, b, err)
		}
	}
}

func TestRefillDebtAndRefund(t *testing.T) {
	b := newBucket(t, 10, time.Second, 0)
	if d := b.AllowN(start, 10); !d.Allowed || d.Remaining != 0 || d.Limit != 10 {
		t.Fatalf("the full burst: %+v", d)
	}
	if d := b.AllowN(start, 1); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("an empty bucket: %+v; want a denial, retry after 100ms", d)
	}
	if d := b.AllowN(start, 11); d.Allowed || d.RetryAfter != floodgate.Never {
		t.Fatalf("a cost above the burst: %+v; want RetryAfter Never", d)
	}
	later := start.Add(100 * time.Millisecond)
	if p := b.Peek(later); !p.Allowed || p.Remaining != 0 {
		t.Fatalf("Peek after one interval: %+v; want one token there", p)
	}
	d, err := b.ChargeN(later, 5)
	if err != nil || !d.Allowed || d.Owed != 4 || d.Remaining != 0 || d.RetryAfter != 500*time.Millisecond {
		t.Fatalf("a charge of 5 beside 1 token: %+v, %v; want 4 owed, retry after 500ms", d, err)
	}
	if b.Allow(later.Add(400 * time.Millisecond)) {
		t.Fatal("admitted while owing")
	}
	if err := b.Refund(5); err != nil {
		t.Fatal(err)
	}
	if p := b.Peek(later); !p.Allowed || p.Owed != 0 {
		t.Fatalf("after the refund: %+v; want the token back and nothing owed", p)
	}
}

func TestChargeAndRefundRejectBadInput(t *testing.T) {
	b := newBucket(t, 10, time.Second, 0)
	if _, err := b.ChargeN(start, 0); err == nil {
		t.Error("ChargeN(0): no error")
	}
	d, err := b.ChargeN(start, math.MaxInt64)
	if !errors.Is(err, floodgate.ErrDebtBound) || d != (floodgate.Decision{}) {
		t.Errorf("ChargeN past the debt bound: %+v, %v; want an error wrapping floodgate.ErrDebtBound", d, err)
	}
	for _, n := range []int64{0, -1, 11} {
		if err := b.Refund(n); err == nil {
			t.Errorf("Refund(%d): no error", n)
		}
	}
	if p := b.Peek(start); p.Remaining != 9 {
		t.Errorf("after refused calls: %+v; want the bucket untouched (Peek's 9 left)", p)
	}
}

// A rule whose interval is not a whole number of nanoseconds is held in
// finer ticks, and its state spans less: 1,000 per 1.000001 ms spans
// about 13.3 days from its origin. Past that the bucket moves its origin,
// and carries what it held exactly: here a debt of about a day.
func TestPastTheStatesSpan(t *testing.T) {
	b := newBucket(t, 1000, time.Millisecond+time.Nanosecond, 0)
	t1 := start.Add(13 * 24 * time.Hour)
	if d, err := b.ChargeN(t1, 86_400_000_000); err != nil || d.Owed != 86_400_000_000-1000 {
		t.Fatalf("a day's worth charged: %+v, %v", d, err)
	}
	t2 := t1.Add(12 * time.Hour) // past the span: the state moves
	if b.Allow(t2) {
		t.Fatal("admitted while owing, after the move")
	}
	before := b.Peek(t2).Owed
	if err := b.Refund(1000); err != nil {
		t.Fatal(err)
	}
	if after := b.Peek(t2).Owed; before-after != 1000 {
		t.Fatalf("a refund of 1000 after the move: owed %d, then %d", before, after)
	}
	t3 := start.Add(60 * 24 * time.Hour) // long after the debt
	if d := b.AllowN(t3, 1000); !d.Allowed {
		t.Fatalf("two months on: %+v; want the full burst", d)
	}
	if b.Allow(t3) {
		t.Fatal("admitted past the burst")
	}
}

// Many more goroutines than cores race on one bucket at a frozen instant,
// at the start and 20 days on (past the state's span, so the first calls
// there move the state under contention): exactly the burst is admitted,
// never a token more.
func TestConcurrentExact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const burst, goroutines, tries = 1000, 64, 40
	b := newBucket(t, burst, time.Millisecond+time.Nanosecond, 0)
	for _, at := range []time.Time{start, start.Add(20 * 24 * time.Hour)} {
		var granted atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range tries {
					n := int64(1 + (g+i)%3)
					if g%2 == 0 && b.Allow(at) {
						granted.Add(1)
					} else if d := b.AllowN(at, n); d.Allowed {
						granted.Add(n)
					}
				}
			}()
		}
		wg.Wait()
		left := b.Peek(at).Remaining
		if b.Peek(at).Allowed {
			left++ // Peek's Remaining counts its own token as taken
		}
		if got := granted.Load(); got+left != burst || got > burst {
			t.Errorf("at %v: %d granted and %d left; want %d in all", at.Sub(start), got, left, burst)
		}
	}
}

func TestHotPathAllocatesNothing(t *testing.T) {
	b := newBucket(t, 1_000_000, time.Second, 0)
	now := start
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Microsecond)
		b.Allow(now)
		b.AllowN(now, 1)
		b.Peek(now)
	}); n != 0 {
		t.Errorf("%v allocations a call; want 0", n)
	}
}
