package floodgate

import "github.com/floodgate-go/floodgate/internal/tally"

// Stats counts what a Limiter has done since New. Every field can be read
// at any time, without stopping requests.
//
// AppendCounts reports the same events as metrics, split so that each
// series counts events of one kind only and the results add up to the
// decisions made: Stats' totals are sums of series.
//
//	Stats field      series of AppendCounts (by their Prometheus names)
//	Allowed          floodgate_requests_total{result="allowed"}
//	Denied           floodgate_requests_total{result="denied"} + {result="denied_global"}
//	DeniedByGlobal   floodgate_requests_total{result="denied_global"}
//	Keys             floodgate_keys
//	MaxKeys          floodgate_keys_max (only with MaxKeys)
//	Evicted          floodgate_evictions_total{reason="idle"}
//	EvictedAtBound   floodgate_evictions_total{reason="bound"} + {reason="fresh"}
//	EvictedFresh     floodgate_evictions_total{reason="fresh"}
type Stats struct {
	// Allowed, Denied and DeniedByGlobal count decisions (AllowN, AllowAt
	// and Allow; Peek is not a decision). Denied includes DeniedByGlobal,
	// the requests the key's own state admitted and the global cap then
	// refused. They are counted only with Config.Stats, and are 0
	// otherwise: counting costs a few nanoseconds on every request (see
	// Config.Stats).
	Allowed, Denied, DeniedByGlobal int64
	// Keys is Len(): the keys held now. MaxKeys is the bound Keys never
	// exceeds (Config.MaxKeys, or its default for 0), or 0 for none
	// (Unbounded).
	Keys, MaxKeys int
	// Evicted counts keys removed for being idle (EvictIdle and the
	// IdleTTL sweeper); EvictedAtBound, keys removed to make room for a
	// new one at Config.MaxKeys. EvictedFresh counts those of
	// EvictedAtBound whose state was already a new key's, so that
	// forgetting them cost nothing; the others are remembered in the
	// sketch, and come back with no more than they left with.
	Evicted, EvictedAtBound, EvictedFresh int64
}

// The decision counters, with Config.Stats: their index in a Limiter's
// tally.
const (
	countAllowed        = iota
	countDenied         // by the key's own state (or a later Limits member: see giveBack)
	countDeniedByGlobal // by the global cap; not in countDenied, so that each is a counter of its own
	numCounts
)

// decided counts a decision, with Config.Stats.
func (l *Limiter) decided(allowed bool) {
	if c := l.count; c != nil {
		if allowed {
			c.Inc(countAllowed)
		} else {
			c.Inc(countDenied)
		}
	}
}

// countDenial counts a refusal by the global cap, with Config.Stats.
func (l *Limiter) countDenial() {
	if c := l.count; c != nil {
		c.Inc(countDeniedByGlobal)
	}
}

// newCounts is the tally behind Stats' decision counts.
func newCounts() *tally.Counts { return tally.New(numCounts) }
