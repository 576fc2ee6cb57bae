package floodgate

import (
	"sync/atomic"
	"time"
)

// Clock tells the time to a Limiter: monotonic nanoseconds from any fixed
// origin. Only differences between readings matter, except to window
// algorithms, which align windows to multiples of Period on the clock's own
// scale.
type Clock interface{ Now() int64 }

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
// every decision reproducible without sleeping. It is safe for concurrent
// use.
type ManualClock struct{ ns atomic.Int64 }

// NewManualClock returns a ManualClock that reads start.
func NewManualClock(start int64) *ManualClock {
	c := &ManualClock{}
	c.ns.Store(start)
	return c
}

// Now returns the current reading.
func (c *ManualClock) Now() int64 { return c.ns.Load() }

// Advance moves the clock by d, which may be negative.
func (c *ManualClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Set moves the clock to ns, earlier or later.
func (c *ManualClock) Set(ns int64) { c.ns.Store(ns) }
