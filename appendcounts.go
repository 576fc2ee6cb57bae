package floodgate

import (
	"github.com/floodgate-go/floodgate/counts"
	"github.com/floodgate-go/floodgate/internal/countinfo"
)

// AppendCounts appends the Limiter's counts to dst (see package counts):
// the requests by result (allowed, denied and denied_global; only with
// Config.Stats, whose counts they are), the keys held and their bound
// (with MaxKeys), and the evictions by reason (idle, bound, fresh). Each
// series counts one kind of event, so that the results add up to the
// decisions made: denied excludes the refusals by the global cap, which
// denied_global counts, and bound excludes the evictions of keys that
// were new already, which fresh counts. Stats has a table of how its
// fields map to these series. Every count
// only grows, but for one case: a Limiter in a Limits whose grant a later
// Limiter refused moves that decision from allowed to denied. Route and
// Policy are "": a middleware that holds Limiters sets them.
//
// It makes the Limiter a counts.Source, which the metrics modules export.
func (l *Limiter) AppendCounts(dst []counts.Sample) []counts.Sample {
	s := l.Stats()
	if c := l.count; c != nil {
		// Each result is one counter read once, not a difference of two
		// read apart, so that none falls between two scrapes.
		dst = append(dst,
			counts.Sample{Metric: counts.Requests, Label: countinfo.Allowed, Value: c.Value(countAllowed)},
			counts.Sample{Metric: counts.Requests, Label: countinfo.Denied, Value: c.Value(countDenied)},
			counts.Sample{Metric: counts.Requests, Label: countinfo.DeniedGlobal, Value: c.Value(countDeniedByGlobal)})
	}
	dst = append(dst, counts.Sample{Metric: counts.Keys, Value: int64(s.Keys)})
	if s.MaxKeys > 0 {
		dst = append(dst, counts.Sample{Metric: counts.KeysMax, Value: int64(s.MaxKeys)})
	}
	return append(dst,
		counts.Sample{Metric: counts.Evictions, Label: countinfo.EvictIdle, Value: s.Evicted},
		counts.Sample{Metric: counts.Evictions, Label: countinfo.EvictBound, Value: s.EvictedAtBound - s.EvictedFresh},
		counts.Sample{Metric: counts.Evictions, Label: countinfo.EvictFresh, Value: s.EvictedFresh})
}
