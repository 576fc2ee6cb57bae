package floodgate

import (
	"github.com/floodgate-go/floodgate/internal/sweeper"
	"math"
	"time"
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
// tick (nil: a ticker of ttl/2): a state that answers as fresh at
// now − ttl has taken nothing since then. The sweep holds l weakly (see
// sweeper.Start), so that a Limiter dropped without Close is collected
// and its sweep ends. done, if not nil, receives each sweep's count
// (for tests).
func (l *Limiter) startSweep(ttl time.Duration, tick <-chan time.Time, done chan<- int) {
	l.stop = make(chan struct{})
	var t *time.Ticker
	if tick == nil {
		t = time.NewTicker(max(ttl/2, time.Millisecond))
		tick = t.C
	}
	l.swept = sweeper.Start(l, tick, t, l.stop, func(l *Limiter) {
		now := l.now()
		if now < math.MinInt64+int64(ttl) {
			return // nothing can have been idle since before the clock's range
		}
		n := l.evictIdleAt(now - int64(ttl))
		if done != nil {
			done <- n
		}
	})
}
