package floodgate

import (
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
)

// CoarseClock is a Clock that trades resolution for speed: one goroutine
// reads the monotonic clock every resolution and stores the reading, and
// Now is a single atomic load. On a machine where reading the clock costs
// tens of nanoseconds, that is most of what a hot-key Allow
// spends. Readings are on SystemClock's scale, so the two can be mixed, and
// never go backwards.
//
// The price is resolution: a limiter on a CoarseClock sees time advance in
// steps, so tokens and windows arrive up to one resolution late. Choose a
// resolution well below your rule's interval (Period/Limit).
//
// Stop ends the goroutine; the clock then stands still, so stop it only
// once no Limiter uses it.
type CoarseClock struct {
	_    cpu.CacheLinePad // the word every request reads, on its own line
	now  atomic.Int64
	_    cpu.CacheLinePad
	read func() int64 // nil: the clock ticks; Now reads the word
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// NewCoarseClock starts a CoarseClock that refreshes every resolution. A
// resolution of 0 or less asks for no coarseness: Now then reads the
// system clock itself, and no goroutine runs.
func NewCoarseClock(resolution time.Duration) *CoarseClock {
	if resolution <= 0 {
		return &CoarseClock{read: systemClock{}.Now}
	}
	t := time.NewTicker(resolution)
	c := newCoarseClock(t.C, systemClock{}.Now)
	go func() {
		<-c.done
		t.Stop()
	}()
	return c
}

// newCoarseClock starts the refreshing goroutine on ticks of tick, reading
// the time with read. Tests drive it with a channel of their own.
func newCoarseClock(tick <-chan time.Time, read func() int64) *CoarseClock {
	c := &CoarseClock{stop: make(chan struct{}), done: make(chan struct{})}
	c.now.Store(read())
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			case <-tick:
				if t := read(); t > c.now.Load() {
					c.now.Store(t) // only this goroutine writes: never backwards
				}
			}
		}
	}()
	return c
}

// Now returns the latest reading.
func (c *CoarseClock) Now() int64 {
	if c.read != nil {
		return c.read()
	}
	return c.now.Load()
}

// Stop ends the refreshing goroutine and waits for it. Later readings
// return the last one. Stop is idempotent.
func (c *CoarseClock) Stop() {
	c.once.Do(func() {
		if c.stop != nil {
			close(c.stop)
			<-c.done
		}
	})
}
