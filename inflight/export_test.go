package inflight

// Sweep runs one pass of the sweeper, for the tests.
func Sweep(l *Limiter) int { return l.sweep() }
