package inflight

// EvictIdle is evictIdle, for the tests in package inflight_test.
func (l *Limiter) EvictIdle() int { return l.evictIdle() }

// InUse is inUse, for the tests in package inflight_test.
func (l *Limiter) InUse() int { return l.inUse() }
