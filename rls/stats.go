package rls

import (
	"math"
	"strings"
	"sync/atomic"

	"github.com/floodgate-go/floodgate/internal/tally"
	"github.com/puzpuzpuz/xsync/v4"
)

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

// value is count i. The counts add hits, which a request chooses
// (hits_addend, up to 2^64 − 1): each saturates at 2^63 − 1 rather than
// wrap, and stays there.
func (s *ruleStats) value(i int) int64 { return s.c.ValueSat(i) }
func (s *ruleStats) add(i int, v uint64) {
	s.c.AddSat(i, int64(min(v, math.MaxInt64)))
}

// detailed is the series of a rule with detailed_metric: one for each
// pair of the request's first two levels (key_value, or a share_threshold
// level's pattern), at most max of them; past that, a request counts in
// the rule's own series. A client that sends a new value each request
// costs one series per value, up to max, and no more.
type detailed struct {
	m    *xsync.Map[string, *ruleStats] // by key1, a 0 byte, key2
	size atomic.Int64
	max  int64
}

func newDetailed(max int) *detailed {
	return &detailed{m: xsync.NewMap[string, *ruleStats](), max: int64(max)}
}

// maxLabel is the longest name (key1, a 0 byte, key2) a detailed series
// takes: a request whose values make a longer one counts in the rule's
// own series, so that a client's 1 MB value never becomes a label.
const maxLabel = 256

// get returns the series named by label (key1, a 0 byte, key2), made if
// there is room; nil past max, or for a label longer than maxLabel.
// label may be a view of a buffer that changes: a series made keeps a
// copy.
func (d *detailed) get(label string) *ruleStats {
	if len(label) > maxLabel {
		return nil
	}
	if st, ok := d.m.Load(label); ok {
		return st
	}
	if d.size.Add(1) > d.max {
		d.size.Add(-1)
		return nil
	}
	st := &ruleStats{}
	st.init()
	st, loaded := d.m.LoadOrStore(strings.Clone(label), st)
	if loaded {
		d.size.Add(-1)
	}
	return st
}

// each calls f with every series' labels and counts.
func (d *detailed) each(f func(key1, key2 string, st *ruleStats)) {
	d.m.Range(func(label string, st *ruleStats) bool {
		key1, key2, _ := strings.Cut(label, "\x00")
		f(key1, key2, st)
		return true
	})
}
