package atomicwindow_test

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate"
	"github.com/floodgate-go/floodgate/atomicwindow"
)

// start is the beginning of a minute, and of a second.
var start = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

type constructor struct {
	name string
	new  func(limit int64, period time.Duration, now time.Time) (*atomicwindow.Window, error)
}

var kinds = []constructor{{"fixed", atomicwindow.NewFixed}, {"sliding", atomicwindow.NewSliding}}

func TestNewRejectsBadRules(t *testing.T) {
	for _, k := range kinds {
		for _, c := range []struct {
			name   string
			limit  int64
			period time.Duration
		}{
			{"zero limit", 0, time.Second},
			{"negative limit", -1, time.Second},
			{"zero period", 1, 0},
			{"negative period", 1, -time.Second},
			{"limit past the packed state", math.MaxInt64, time.Second},
		} {
			w, err := k.new(c.limit, c.period, start)
			if err == nil || w != nil {
				t.Errorf("%s, %s: got %v, %v; want an error", k.name, c.name, w, err)
			}
		}
	}
	if _, err := atomicwindow.NewSliding(1<<23-1, time.Second, start); err == nil {
		t.Error("sliding, limit 2^23 − 1: no error")
	}
}

func TestFixedWindow(t *testing.T) {
	w, err := atomicwindow.NewFixed(10, time.Second, start)
	if err != nil {
		t.Fatal(err)
	}
	mid := start.Add(400 * time.Millisecond)
	if d := w.AllowN(mid, 10); !d.Allowed || d.Remaining != 0 || d.Limit != 10 {
		t.Fatalf("the whole limit: %+v", d)
	}
	if d := w.AllowN(mid, 1); d.Allowed || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("a full window: %+v; want retry after 600ms, at the next window", d)
	}
	if d := w.AllowN(mid, 11); d.Allowed || d.RetryAfter != floodgate.Never {
		t.Fatalf("a cost above the limit: %+v; want RetryAfter Never", d)
	}
	if err := w.Refund(mid, 3); err != nil {
		t.Fatal(err)
	}
	if p := w.Peek(mid); !p.Allowed || p.Remaining != 2 {
		t.Fatalf("after a refund of 3: %+v; want 3 left (Peek's 2)", p)
	}
	d, err := w.ChargeN(mid, 8)
	if err != nil || !d.Allowed || d.Owed != 5 || d.RetryAfter != 600*time.Millisecond {
		t.Fatalf("a charge of 8 beside 3 left: %+v, %v; want 5 owed until the next window", d, err)
	}
	if !w.Allow(start.Add(time.Second)) {
		t.Fatal("the next window: refused")
	}
}

func TestSlidingWindowWeighsThePreviousWindow(t *testing.T) {
	w, err := atomicwindow.NewSliding(100, time.Minute, start)
	if err != nil {
		t.Fatal(err)
	}
	w.AllowN(start, 80)
	at := start.Add(105 * time.Second) // 3/4 of the last window out of the sliding one
	if d := w.AllowN(at, 81); d.Allowed {
		t.Fatalf("81 beside 80 × 1/4: %+v", d)
	}
	if d := w.AllowN(at, 80); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("80 beside 80 × 1/4: %+v", d)
	}
}

func TestChargeAndRefundRejectBadInput(t *testing.T) {
	for _, k := range kinds {
		w, err := k.new(10, time.Second, start)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.ChargeN(start, 0); err == nil {
			t.Errorf("%s: ChargeN(0): no error", k.name)
		}
		if _, err := w.ChargeN(start, math.MaxInt64); !errors.Is(err, floodgate.ErrDebtBound) {
			t.Errorf("%s: ChargeN past the bound: %v; want an error wrapping floodgate.ErrDebtBound", k.name, err)
		}
		for _, n := range []int64{0, -1} {
			if err := w.Refund(start, n); err == nil {
				t.Errorf("%s: Refund(%d): no error", k.name, n)
			}
		}
		if p := w.Peek(start); p.Remaining != 9 {
			t.Errorf("%s: after refused calls: %+v; want the window untouched", k.name, p)
		}
	}
}

// The largest limits leave a state's packed window index the fewest
// bits: a sliding counter of 8,000,000 spans 2^15 windows from its
// origin, 32.8 s of 1 ms windows. Past that it moves its origin, and
// carries what still counts exactly: here the previous window's count,
// which weighs half at the middle of the next window.
func TestPastTheStatesSpan(t *testing.T) {
	const limit = 8_000_000
	w, err := atomicwindow.NewSliding(limit, time.Millisecond, start)
	if err != nil {
		t.Fatal(err)
	}
	t1 := start.Add(1 << 15 * time.Millisecond) // the last window in place
	if d := w.AllowN(t1, limit); !d.Allowed {
		t.Fatalf("the whole limit: %+v", d)
	}
	t2 := t1.Add(1500 * time.Microsecond) // the next window, past the span
	if d := w.AllowN(t2, limit/2+1); d.Allowed || d.Remaining != limit/2 {
		t.Fatalf("past the span: %+v; want half the limit left", d)
	}
	if d, err := w.ChargeN(t2, limit/2+5); err != nil || d.Owed != 5 {
		t.Fatalf("a charge of 5 past the limit: %+v, %v", d, err)
	}
	if err := w.Refund(t2, 5); err != nil {
		t.Fatal(err)
	}
	if d := w.Peek(t2); d.Allowed || d.Owed != 0 || d.Remaining != 0 {
		t.Fatalf("after the refund: %+v; want full, owing nothing", d)
	}
}

// Many more goroutines than cores race on one window at a frozen instant:
// exactly the limit is admitted, never a unit more. Then the same on a
// window of the largest limit an hour on, past the state's span, so that
// the first calls move the state under contention.
func TestConcurrentExact(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4 * runtime.NumCPU()))
	const goroutines, tries = 64, 40
	race := func(t *testing.T, name string, w *atomicwindow.Window, at time.Time, limit int64, cost func(g, i int) int64) {
		var granted atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range tries {
					n := cost(g, i)
					if n == 1 && g%2 == 0 {
						if w.Allow(at) {
							granted.Add(1)
						}
					} else if d := w.AllowN(at, n); d.Allowed {
						granted.Add(n)
					}
				}
			}()
		}
		wg.Wait()
		p := w.Peek(at)
		left := p.Remaining
		if p.Allowed {
			left++ // Peek's Remaining counts its own unit as taken
		}
		if got := granted.Load(); got+left != limit || got > limit {
			t.Errorf("%s: %d granted and %d left; want %d in all", name, got, left, limit)
		}
	}
	for _, k := range kinds {
		w, err := k.new(1000, time.Millisecond, start)
		if err != nil {
			t.Fatal(err)
		}
		race(t, k.name, w, start, 1000, func(g, i int) int64 { return int64(1 + (g+i)%3) })
	}
	// The largest limits, in costs of a thousandth: exactly 1,000 fit.
	for _, c := range []struct {
		constructor
		limit int64
	}{{kinds[0], 1 << 46}, {kinds[1], 8_000_000}} {
		w, err := c.new(c.limit, time.Millisecond, start)
		if err != nil {
			t.Fatal(err)
		}
		race(t, c.name+" past the span", w, start.Add(time.Hour), c.limit, func(int, int) int64 { return c.limit / 1000 })
	}
}

func TestHotPathAllocatesNothing(t *testing.T) {
	for _, k := range kinds {
		w, err := k.new(1_000_000, time.Second, start)
		if err != nil {
			t.Fatal(err)
		}
		now := start
		if n := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Microsecond)
			w.Allow(now)
			w.AllowN(now, 1)
			w.Peek(now)
		}); n != 0 {
			t.Errorf("%s: %v allocations a call; want 0", k.name, n)
		}
	}
}
