package floodgate

import (
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

// sweep evicts, on every tick, keys that have been idle for ttl: a state
// that answers as fresh at now − ttl has taken nothing since then. done, if
// not nil, receives each sweep's count (for tests).
func (l *Limiter) sweep(ttl time.Duration, tick <-chan time.Time, done chan<- int) {
	defer close(l.swept)
	for {
		select {
		case <-l.stop:
			return
		case <-tick:
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
}
