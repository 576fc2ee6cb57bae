package policy

import (
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
)

// This file reads the cost of a request for its After policies: from a
// header's or a metadata key's values (ParseCost), or from what its
// handler reported (Reported).

// MaxCost is the most one request is charged for an After policy: a
// larger cost counts as MaxCost (see ParseCost).
const MaxCost = 1 << 52

// ParseCost is the cost that a header's or a metadata key's values carry:
// one non-negative decimal integer (a value past MaxCost counts as
// MaxCost); else old, as if none were carried.
func ParseCost(vs []string, old int64) int64 {
	if len(vs) != 1 {
		return old
	}
	v := strings.TrimSpace(vs[0])
	if v == "" || v[0] < '0' || v[0] > '9' { // no sign
		return old
	}
	c, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) {
			return MaxCost
		}
		return old
	}
	return int64(min(c, MaxCost))
}

// Reported is the sum of the costs a request's handler reported, at most
// MaxCost, safe for concurrent use. Its zero value holds no report.
type Reported struct{ v atomic.Int64 } // the sum plus 1; 0 for none

// Add adds cost, 0 or more, to the sum.
func (r *Reported) Add(cost int64) {
	for {
		old := r.v.Load()
		if r.v.CompareAndSwap(old, min(max(old-1, 0)+min(cost, MaxCost), MaxCost)+1) {
			return
		}
	}
}

// Load returns the sum, or -1 if nothing was reported.
func (r *Reported) Load() int64 { return r.v.Load() - 1 }
