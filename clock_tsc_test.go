package floodgate

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-go/floodgate/internal/tsc"
)

// fakeCounter is a time stamp counter that the test sets.
type fakeCounter struct{ v atomic.Uint64 }

func (f *fakeCounter) read() uint64 { return f.v.Load() }

// testTSC is a TSCClock on a tick channel the test drives.
type testTSC struct {
	*TSCClock
	tick     chan time.Time
	anchored chan struct{}
}

func newTestTSC(counter func() uint64, mono func() int64) testTSC {
	tc := testTSC{tick: make(chan time.Time), anchored: make(chan struct{})}
	tc.TSCClock = newTSCClock(tc.tick, tc.anchored, counter, mono, 0)
	return tc
}

// anchor sends one tick and waits until the clock has handled it, so that
// nothing the test changes after it reaches that anchor.
func (tc testTSC) anchor() {
	tc.tick <- time.Time{}
	<-tc.anchored
}

// TestTSCClock drives the counter, the monotonic clock and the anchoring
// ticks by hand: before the first anchor Now is the monotonic clock; after
// it, the anchor's instant plus the counter's ticks at the measured rate;
// a counter behind the anchor reads as the anchor; a pair that says
// nothing about the rate leaves the anchor alone.
func TestTSCClock(t *testing.T) {
	ctr, mono := &fakeCounter{}, NewManualClock(100)
	ctr.v.Store(1000)
	c := newTestTSC(ctr.read, mono.Now)
	defer c.Stop()
	if got := c.Now(); got != 100 {
		t.Fatalf("before an anchor Now = %d, want the monotonic 100", got)
	}
	ctr.v.Store(3000) // 2,000 ticks in 1,000 ns: 2 ticks a nanosecond
	mono.Set(1100)
	c.anchor()
	mono.Set(5000) // the monotonic clock is not read once anchored
	for _, tc := range []struct {
		counter uint64
		want    int64
	}{{3000, 1100}, {3400, 1300}, {3401, 1300}, {2900, 1100}, {3000 + 2e12, 1100 + 1e12}} {
		ctr.v.Store(tc.counter)
		if got := c.Now(); got != tc.want {
			t.Errorf("counter %d: Now = %d, want %d", tc.counter, got, tc.want)
		}
	}
	// The monotonic clock goes back: no rate, no new anchor.
	ctr.v.Store(5000)
	mono.Set(50)
	c.anchor()
	ctr.v.Store(3400)
	if got := c.Now(); got != 1300 {
		t.Fatalf("a pair with no rate moved the anchor: Now = %d, want 1300", got)
	}
	c.Stop()
	c.Stop() // idempotent
	ctr.v.Store(3600)
	if got := c.Now(); got != 1400 {
		t.Fatalf("after Stop Now = %d, want 1400 from the last anchor", got)
	}
}

// TestTSCClockFollowsRate: the rate is measured from a pair at most
// 2×tscRebaseEvery anchors old, so a counter that changes speed is followed
// exactly once the old pair is left behind.
func TestTSCClockFollowsRate(t *testing.T) {
	ctr, mono := &fakeCounter{}, NewManualClock(0)
	c := newTestTSC(ctr.read, mono.Now)
	defer c.Stop()
	step := func(ticksPerNs uint64) {
		ctr.v.Add(1000 * ticksPerNs)
		mono.Advance(1000)
		c.anchor()
	}
	for range tscRebaseEvery {
		step(2)
	}
	for range 2 * tscRebaseEvery {
		step(4)
	}
	at, ns := ctr.v.Load(), mono.Now()
	ctr.v.Store(at + 400)
	if got := c.Now(); got != ns+100 {
		t.Fatalf("at 4 ticks a nanosecond, 400 ticks read as %d ns, want 100", got-ns)
	}
}

// TestTSCClockRate: tscRate refuses pairs that say nothing, and is exact
// where the division is.
func TestTSCClockRate(t *testing.T) {
	for _, tc := range []struct {
		from, to tscAnchor
		mul      uint64
		ok       bool
	}{
		{tscAnchor{tsc: 0, ns: 0}, tscAnchor{tsc: 2000, ns: 1000}, 1 << 31, true},
		{tscAnchor{tsc: 0, ns: 0}, tscAnchor{tsc: 1000, ns: 3000}, 3 << 32, true},
		{tscAnchor{tsc: 10, ns: 0}, tscAnchor{tsc: 10, ns: 1000}, 0, false},  // no ticks
		{tscAnchor{tsc: 10, ns: 5}, tscAnchor{tsc: 20, ns: 5}, 0, false},     // no time
		{tscAnchor{tsc: 20, ns: 0}, tscAnchor{tsc: 10, ns: 9}, 0, false},     // counter back
		{tscAnchor{tsc: 0, ns: 9}, tscAnchor{tsc: 10, ns: 0}, 0, false},      // clock back
		{tscAnchor{tsc: 0, ns: 0}, tscAnchor{tsc: 1, ns: 1 << 40}, 0, false}, // 2^40 ns a tick
	} {
		mul, ok := tscRate(tc.from, tc.to)
		if ok != tc.ok || mul != tc.mul {
			t.Errorf("tscRate(%+v, %+v) = %d, %v; want %d, %v", tc.from, tc.to, mul, ok, tc.mul, tc.ok)
		}
	}
}

// TestTSCClockFallback: without an invariant counter the clock reads
// SystemClock and runs no goroutine.
func TestTSCClockFallback(t *testing.T) {
	mono := NewManualClock(42)
	c := &TSCClock{mono: mono.Now}
	if c.stop != nil || c.Now() != 42 {
		t.Fatalf("a fallback TSCClock read %d (anchoring %v), want 42 and false", c.Now(), c.stop != nil)
	}
	c.Stop()
	c.Stop()
	got := NewTSCClock()
	defer got.Stop()
	if anchoring := got.stop != nil; anchoring != tsc.Invariant() {
		t.Fatalf("NewTSCClock anchoring the counter: %v, processor says invariant %v", anchoring, tsc.Invariant())
	}
	if got.stop != nil && got.anchor.Load() == nil {
		t.Fatal("NewTSCClock returned before its first anchor")
	}
}

// TestTSCClockOnTheCounter anchors the real counter by hand: across a
// stretch of real time, what it measures agrees with the monotonic clock.
// The tolerance is wide (a quarter), because it only guards the units; the
// rate's precision comes from seconds of anchoring, which a test does not
// wait for. A goroutine preempted between two paired reads skews one
// attempt, so it passes if any of five does: a wrong unit fails them all.
func TestTSCClockOnTheCounter(t *testing.T) {
	if !tsc.Invariant() {
		t.Skip("no invariant time stamp counter on this processor")
	}
	sys := SystemClock()
	spin := func(d int64) {
		for start := sys.Now(); sys.Now()-start < d; {
		}
	}
	var got, want int64
	for attempt := 0; attempt < 5; attempt++ {
		c := newTestTSC(nil, sys.Now)
		spin(2e6)
		c.anchor()
		a, s0 := c.Now(), sys.Now()
		spin(2e6)
		b, s1 := c.Now(), sys.Now()
		c.Stop()
		got, want = b-a, s1-s0
		if got >= want*3/4 && got <= want*5/4 {
			break
		}
	}
	if got < want*3/4 || got > want*5/4 {
		t.Fatalf("the counter measured %d ns where the monotonic clock measured %d", got, want)
	}
	c := NewTSCClock()
	defer c.Stop()
	l, err := New(Config{Rule: Rule{Limit: 2, Period: time.Hour}, Clock: c})
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
		t.Fatalf("a limiter on a TSCClock admitted %d of its burst of 2", passed)
	}
}
