package floodgate

import (
	"testing"
	"time"
)

// TestCoarseClock drives the clock with ticks of the test's own and a
// manual source: Now moves only on a tick, never backwards, and stands
// still after Stop.
func TestCoarseClock(t *testing.T) {
	src := NewManualClock(100)
	tick := make(chan time.Time)
	c := newCoarseClock(tick, src.Now)
	if got := c.Now(); got != 100 {
		t.Fatalf("first reading %d, want 100", got)
	}
	src.Advance(50)
	if got := c.Now(); got != 100 {
		t.Fatalf("moved without a tick: %d", got)
	}
	tick <- time.Time{}
	tick <- time.Time{} // the second send returns once the first tick is handled
	if got := c.Now(); got != 150 {
		t.Fatalf("after a tick %d, want 150", got)
	}
	src.Set(120) // the source goes back: the clock does not
	tick <- time.Time{}
	tick <- time.Time{}
	if got := c.Now(); got != 150 {
		t.Fatalf("went backwards to %d", got)
	}
	c.Stop()
	c.Stop() // idempotent
	src.Set(1000)
	if got := c.Now(); got != 150 {
		t.Fatalf("moved after Stop: %d", got)
	}
}

// TestCoarseClockExact: resolution 0 means no coarseness, and a limiter on
// a CoarseClock decides as on the clock it samples.
func TestCoarseClockExact(t *testing.T) {
	c := NewCoarseClock(0)
	a, b := c.Now(), c.Now()
	if b < a || a <= 0 {
		t.Fatalf("an exact CoarseClock read %d then %d", a, b)
	}
	c.Stop()
	coarse := NewCoarseClock(time.Hour) // ticks never come during the test
	defer coarse.Stop()
	l, err := New(Config{Rule: Rule{Limit: 2, Period: time.Hour}, Clock: coarse})
	if err != nil {
		t.Fatal(err)
	}
	passed := 0
	for range 5 {
		if l.Allow("k") {
			passed++
		}
	}
	if passed != 2 {
		t.Fatalf("a limiter on a CoarseClock admitted %d of its burst of 2", passed)
	}
}
