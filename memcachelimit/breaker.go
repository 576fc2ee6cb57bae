package memcachelimit

import (
	"math"
	"sync/atomic"
)

// breaker stops calls to a memcached that keeps failing. Closed, it lets every
// call through and counts consecutive failures; at after of them it opens
// until every nanoseconds have passed. Then one call at a time, the probe,
// goes through: its success closes the breaker, its failure opens it for
// another period. While open it costs a caller two atomic loads.
type breaker struct {
	after, every int64
	failures     atomic.Int64
	openUntil    atomic.Int64 // closed, or the end of the open period
	probing      atomic.Bool
	last         atomic.Pointer[failure] // the latest failure of memcached, which FailError names while the breaker is open
}

// failure is a round trip's failure of memcached: its error, and whether it
// ran out of Timeout.
type failure struct {
	err     error
	timeout bool
}

// closed is openUntil's value while the breaker is closed.
const closed = math.MinInt64

// enter reports whether a call at now may go to memcached, and whether it is
// the probe.
func (b *breaker) enter(now int64) (probe, ok bool) {
	until := b.openUntil.Load()
	if until == closed {
		return false, true
	}
	if now < until || !b.probing.CompareAndSwap(false, true) {
		return false, false
	}
	return true, true
}

// succeed records a call that memcached answered.
func (b *breaker) succeed(probe bool) {
	b.failures.Store(0)
	if b.openUntil.Load() != closed {
		b.openUntil.Store(closed)
	}
	if probe {
		b.probing.Store(false)
	}
}

// fail records a failed call at now, and reports whether it opened the
// breaker.
func (b *breaker) fail(probe bool, now int64) bool {
	if probe {
		b.openUntil.Store(now + b.every)
		b.probing.Store(false)
		return false
	}
	if b.failures.Add(1) < b.after {
		return false
	}
	return b.openUntil.CompareAndSwap(closed, now+b.every)
}

// abandon records a call whose caller gave up before memcached answered.
func (b *breaker) abandon(probe bool) {
	if probe {
		b.probing.Store(false)
	}
}
