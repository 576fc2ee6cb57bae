package floodgate

import (
	"sync"
	"sync/atomic"
	"time"
)

// Clock tells the time to a Limiter: monotonic nanoseconds from any fixed
// origin. Only differences between readings matter, except to window
// algorithms, which align windows to multiples of Period on the clock's own
// scale.
type Clock interface{ Now() int64 }

// waker is a Clock that also wakes a waiting request at an instant of its
// own scale. Wait uses it when the limiter's Clock is one; with any other
// Clock it waits on a time.Timer. ManualClock is the waker, whose wakes
// fire on Advance and Set, so that tests of Wait never sleep.
type waker interface {
	Clock
	// wakeAt returns a channel that is closed once Now reads at or after
	// at, and a function that abandons the wake.
	wakeAt(at int64) (wake <-chan struct{}, stop func())
}

// base is the origin of SystemClock: a reading taken once, carrying Go's
// monotonic clock, so that time.Since(base) never jumps with the wall clock.
var base = time.Now()

type systemClock struct{}

func (systemClock) Now() int64 { return int64(time.Since(base)) }

// SystemClock returns the process's monotonic clock: nanoseconds since an
// origin fixed when the package was loaded. It is time.Since of that origin,
// not time.Now().UnixNano(), so a step of the wall clock (NTP, an operator)
// neither mints nor withholds tokens.
func SystemClock() Clock { return systemClock{} }

// ManualClock is a Clock that moves only when told to. Tests use it to make
// every decision reproducible without sleeping. A Wait on a limiter with
// a ManualClock ends when Advance or Set brings the clock to its instant,
// never on a timer. It is safe for concurrent use.
type ManualClock struct {
	ns      atomic.Int64
	pending atomic.Int64 // wakes registered or being registered: moves take mu only when there are some
	mu      sync.Mutex   // guards wakes
	wakes   map[*manualWake]struct{}
}

type manualWake struct {
	at int64
	ch chan struct{}
}

// NewManualClock returns a ManualClock that reads start.
func NewManualClock(start int64) *ManualClock {
	c := &ManualClock{}
	c.ns.Store(start)
	return c
}

// Now returns the current reading.
func (c *ManualClock) Now() int64 { return c.ns.Load() }

// Advance moves the clock by d, which may be negative, and fires the wakes
// it reaches.
func (c *ManualClock) Advance(d time.Duration) {
	c.ns.Add(int64(d))
	c.fire()
}

// Set moves the clock to ns, earlier or later, and fires the wakes it
// reaches.
func (c *ManualClock) Set(ns int64) {
	c.ns.Store(ns)
	c.fire()
}

// fire closes the wakes due now. A move that finds none pending takes no
// lock, so that goroutines moving the clock never contend; wakeAt counts
// a wake as pending before it reads the clock, so a move it misses is one
// that it saw.
func (c *ManualClock) fire() {
	if c.pending.Load() == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.ns.Load()
	for w := range c.wakes {
		if w.at <= now {
			close(w.ch)
			delete(c.wakes, w)
			c.pending.Add(-1)
		}
	}
}

// wakeAt returns a channel that is closed once the clock reads at or after
// at, and a function that abandons the wake.
func (c *ManualClock) wakeAt(at int64) (<-chan struct{}, func()) {
	w := &manualWake{at: at, ch: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending.Add(1)
	if c.ns.Load() >= at {
		c.pending.Add(-1)
		close(w.ch)
		return w.ch, func() {}
	}
	if c.wakes == nil {
		c.wakes = map[*manualWake]struct{}{}
	}
	c.wakes[w] = struct{}{}
	return w.ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if _, ok := c.wakes[w]; ok {
			delete(c.wakes, w)
			c.pending.Add(-1)
		}
	}
}

// Waiting returns the number of wakes not yet fired nor abandoned: a test
// waits for its waiters to block before it moves the clock.
func (c *ManualClock) Waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.wakes)
}

// now reads the limiter's clock. It is small enough to inline into every
// request: a ticking CoarseClock is one load, and other clocks are one call.
func (l *Limiter) now() int64 {
	if c := l.coarse; c != nil {
		return c.now.Load()
	}
	return l.readClock()
}

func (l *Limiter) readClock() int64 {
	if l.clock == nil {
		return int64(time.Since(base))
	}
	return l.clock.Now()
}
