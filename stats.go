package floodgate

import "github.com/puzpuzpuz/xsync/v4"

// Stats counts what a Limiter has done since New. Every field can be read
// at any time, without stopping requests: the counts are striped
// (xsync.Counter), so no two cores write one word to keep them.
type Stats struct {
	// Allowed, Denied and DeniedByGlobal count decisions (AllowN, AllowAt
	// and Allow; Peek is not a decision). Denied includes DeniedByGlobal,
	// the requests the key's own state admitted and the global cap then
	// refused. They are counted only with Config.Stats, and are 0
	// otherwise: counting costs a striped add on every request.
	Allowed, Denied, DeniedByGlobal int64
	// Keys is Len(): the keys held now.
	Keys int
	// Evicted counts keys removed for being idle (EvictIdle and the
	// IdleTTL sweeper); EvictedAtBound, keys removed to make room for a
	// new one at Config.MaxKeys.
	Evicted, EvictedAtBound int64
}

// counters are the striped counts behind Stats.
type counters struct {
	allowed, denied, deniedByGlobal *xsync.Counter
}

func newCounters() *counters {
	return &counters{allowed: xsync.NewCounter(), denied: xsync.NewCounter(), deniedByGlobal: xsync.NewCounter()}
}

// decided counts one decision.
func (c *counters) decided(allowed bool) {
	if allowed {
		c.allowed.Inc()
	} else {
		c.denied.Inc()
	}
}

// decided counts a decision, with Config.Stats.
func (l *Limiter) decided(allowed bool) {
	if l.count != nil {
		l.count.decided(allowed)
	}
}
