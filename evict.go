package floodgate

import (
	"math"
	"runtime"
	"time"
	"weak"
)

// evictIdleAt is EvictIdle at an explicit instant: the sweeper passes
// now − IdleTTL, so that it evicts the keys idle for that long.
func (l *Limiter) evictIdleAt(now int64) int {
	// Publish the instant before any key disappears, so that whoever finds
	// a key missing also finds the instant.
	for {
		old := l.evictedAt.Load()
		if old >= now || l.evictedAt.CompareAndSwap(old, now) {
			break
		}
	}
	var n int
	if l.kind == objects {
		n = l.evictIdleObjects(now)
	} else {
		n = l.evictIdleWords(now)
	}
	l.evicted.Add(int64(n))
	return n
}

// startSweep starts the sweep of keys idle for ttl, on every tick of
// tick (nil: a ticker of ttl/2). The sweep holds l weakly, so that a
// Limiter dropped without Close is collected and its sweep ends (the
// cleanup closes gone). done, if not nil, receives each sweep's count
// (for tests).
func (l *Limiter) startSweep(ttl time.Duration, tick <-chan time.Time, done chan<- int) {
	l.stop, l.swept = make(chan struct{}), make(chan struct{})
	var t *time.Ticker
	if tick == nil {
		t = time.NewTicker(max(ttl/2, time.Millisecond))
		tick = t.C
	}
	gone := make(chan struct{})
	runtime.AddCleanup(l, func(gone chan struct{}) { close(gone) }, gone)
	go sweep(weak.Make(l), ttl, tick, t, l.stop, l.swept, gone, done)
}

// sweep evicts, on every tick, keys that have been idle for ttl: a state
// that answers as fresh at now − ttl has taken nothing since then. It
// ends when stop (Close) or gone (l collected) is closed, then closes
// swept.
func sweep(w weak.Pointer[Limiter], ttl time.Duration, tick <-chan time.Time, t *time.Ticker, stop, swept, gone chan struct{}, done chan<- int) {
	defer close(swept)
	if t != nil {
		defer t.Stop()
	}
	for {
		select {
		case <-stop:
			return
		case <-gone:
			return
		case <-tick:
		}
		l := w.Value()
		if l == nil {
			return
		}
		now := l.now()
		if now < math.MinInt64+int64(ttl) {
			continue // nothing can have been idle since before the clock's range
		}
		n := l.evictIdleAt(now - int64(ttl))
		if done != nil {
			done <- n
		}
	}
}
