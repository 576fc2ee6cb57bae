package rls

import "github.com/floodgate-go/floodgate/internal/tally"

// A rule's counts, as envoyproxy/ratelimit names them.
const (
	statTotal  = iota // total_hits
	statOver          // over_limit
	statNear          // near_limit
	statWithin        // within_limit
	statShadow        // shadow_mode
	nStats
)

// statNames are the counts' names, by index.
var statNames = [nStats]string{"total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode"}

// ruleStats is one rule's counts, kept per P so that a hot rule's
// requests on many cores never write one cache line.
type ruleStats struct{ c *tally.Counts }

func (s *ruleStats) init()              { s.c = tally.New(nStats) }
func (s *ruleStats) share(o *ruleStats) { s.c = o.c }
func (s *ruleStats) value(i int) int64  { return s.c.Value(i) }
func (s *ruleStats) add(i int, v uint64) {
	if v > 0 {
		s.c.Add(i, int64(min(v, 1<<62)))
	}
}
