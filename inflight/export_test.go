package inflight

// EvictIdle is evictIdle, for the tests in package inflight_test.
func (l *Limiter) EvictIdle() int { return l.evictIdle() }

// InUse is inUse, for the tests in package inflight_test.
func (l *Limiter) InUse() int { return l.inUse() }

// Held reports whether the slot is held: issued and not yet released.
func (s Slot) Held() bool { return s.t != nil && s.t.gen.Load() == s.gen }

// MaxQueue is maxQueue, for the tests in package inflight_test.
const MaxQueue = maxQueue

// Swept returns the channel the sweep closes when it ends: nil without
// a sweep.
func (l *Limiter) Swept() <-chan struct{} { return l.swept }

// Bound is the bound on the keys held: 0 for none.
func (l *Limiter) Bound() int { return l.max }
