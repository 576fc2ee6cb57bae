package shardedlog_test

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/shardedlog"
)

var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func newLog(t *testing.T, limit int64, period time.Duration) *shardedlog.Log {
	t.Helper()
	l, err := shardedlog.New(limit, period, start)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestNewRejectsBadRules(t *testing.T) {
	for _, c := range []struct {
		name   string
		limit  int64
		period time.Duration
	}{
		{"zero limit", 0, time.Second},
		{"negative limit", -1, time.Second},
		{"zero period", 1, 0},
		{"negative period", 1, -time.Second},
		{"limit above the log's", 1 << 22, time.Second},
	} {
		l, err := shardedlog.New(c.limit, c.period, start)
		if err == nil || l != nil {
			t.Errorf("%s: New(%d, %v) = %v, %v; want an error", c.name, c.limit, c.period, l, err)
		}
	}
}

func TestWindowDebt(t *testing.T) {
	l := newLog(t, 10, time.Second)
	if d := l.AllowN(start, 4); !d.Allowed || d.Remaining != 6 || d.Limit != 10 {
		t.Fatalf("4 of 10: %+v", d)
	}
	at := start.Add(600 * time.Millisecond)
	if d := l.AllowN(at, 7); d.Allowed || d.RetryAfter != 400*time.Millisecond {
		t.Fatalf("7 beside 4: %+v; want retry after 400ms, when the 4 leave", d)
	}
	if d := l.AllowN(at, 11); d.Allowed || d.RetryAfter != floodgate.Never {
		t.Fatalf("a cost above the limit: %+v; want RetryAfter Never", d)
	}
	d, err := l.ChargeN(at, 9)
	if err != nil || !d.Allowed || d.Owed != 3 || d.RetryAfter != 400*time.Millisecond {
		t.Fatalf("a charge of 9 beside 4: %+v, %v; want 3 owed, retry after 400ms (when the 4 leave)", d, err)
	}
	if l.Allow(start.Add(999 * time.Millisecond)) {
		t.Fatal("admitted while owing")
	}
	if !l.Allow(start.Add(time.Second)) || l.Allow(start.Add(time.Second)) {
		t.Fatal("once the 4 left: want one more admitted beside the 9, and no second")
	}
	if !l.Allow(at.Add(time.Second)) {
		t.Fatal("refused once the 9 have left the window")
	}
}

func TestChargeRejectsBadInput(t *testing.T) {
	l := newLog(t, 10, time.Second)
	if _, err := l.ChargeN(start, 0); err == nil {
		t.Error("ChargeN(0): no error")
	}
	if _, err := l.ChargeN(start, 2561); !errors.Is(err, floodgate.ErrDebtBound) {
		t.Errorf("ChargeN past 256 times the limit: %v; want an error wrapping floodgate.ErrDebtBound", err)
	}
	if p := l.Peek(start); p.Remaining != 9 {
		t.Errorf("after refused calls: %+v; want the log untouched", p)
	}
}

// Many more goroutines than cores race on one log at a frozen instant:
// exactly the limit is admitted, never a unit more.
func TestConcurrentExact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const limit, goroutines, tries = 1000, 64, 40
	l := newLog(t, limit, time.Second)
	var granted atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range tries {
				n := int64(1 + (g+i)%3)
				if g%2 == 0 && l.Allow(start) {
					granted.Add(1)
				} else if d := l.AllowN(start, n); d.Allowed {
					granted.Add(n)
				}
			}
		}()
	}
	wg.Wait()
	p := l.Peek(start)
	left := p.Remaining
	if p.Allowed {
		left++ // Peek's Remaining counts its own unit as taken
	}
	if got := granted.Load(); got+left != limit || got > limit {
		t.Errorf("%d granted and %d left; want %d in all", got, left, limit)
	}
}

// An admitted request allocates nothing once the ring has grown to the
// window: here the window holds at most 8 entries.
func TestHotPathAllocatesNothing(t *testing.T) {
	l := newLog(t, 1_000_000, 4*time.Microsecond)
	now := start
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Microsecond)
		l.Allow(now)
		l.AllowN(now, 1)
		l.Peek(now)
	}); n != 0 {
		t.Errorf("%v allocations a call; want 0", n)
	}
}
