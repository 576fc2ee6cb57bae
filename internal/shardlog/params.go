package shardlog

import (
	"fmt"
	"math"
	"math/bits"
	"time"

	"github.com/floodgate-go/floodgate/internal/decision"
)

// Params is a validated rule for the sliding window log: at most Limit
// cost admitted in any window (now − Period, now].
type Params struct {
	limit  int64
	period int64
}

// maxLogLimit keeps the ring (at most the power of two at or above twice
// the window's cost plus 2, see Bound) within what the 24-bit entry
// sequence tells apart: a ring of at most 2^23 entries, half the
// sequence's range, so that an index a lap ahead is never taken for one
// behind.
const maxLogLimit = 1<<22 - 2

// debtFactor is how many limits a window may hold after a charge (see
// Bound), below maxLogLimit.
const debtFactor = 256

// ErrDebtBound is wrapped by the error of a charge that would leave more
// cost in the window than Params.Bound: nothing is charged then.
var ErrDebtBound = decision.ErrDebtBound

// NewParams validates a rule of limit per period for the sliding log.
// Supported range: limit from 1 to 4,194,302 and any positive period.
func NewParams(limit int64, period time.Duration) (Params, error) {
	switch {
	case limit <= 0:
		return Params{}, fmt.Errorf("limit must be at least 1, got %d", limit)
	case limit > maxLogLimit:
		return Params{}, fmt.Errorf("limit %d is above the sliding log's %d", limit, maxLogLimit)
	case period <= 0:
		return Params{}, fmt.Errorf("period must be positive, got %v", period)
	}
	return Params{limit: limit, period: int64(period)}, nil
}

// Bound returns the most cost the window may hold after a charge, the
// bound of a debt: 256 times the limit, and at most 4,194,302 (the largest
// limit), so that a key may owe up to Bound − Limit. Every entry costs at
// least 1 but a refunded one, so the window never holds more than Bound
// entries that carry cost, and the ring never more than the power of two
// at or above 2(Bound+2) entries (see Log).
func (p *Params) Bound() int64 { return min(maxLogLimit, debtFactor*p.limit) }

// fits reports whether a request of cost n beside a window that holds w
// fits the rule, for op: a grant's cost must fit the limit, a charge's the
// bound; a refund always fits.
func (p *Params) fits(w, n int64, op op) bool {
	switch op {
	case opCharge:
		b := p.Bound()
		return n >= 1 && n <= b && w+n <= b
	case opRefund:
		return true
	}
	return n >= 1 && n <= p.limit && w+n <= p.limit
}

// chargeError is the error of a charge of n, which charges nothing: below
// 1, or past the bound beside a window that holds w.
func (p *Params) chargeError(n, w int64) error {
	if n < 1 {
		return fmt.Errorf("shardedlog: a charge must be at least 1, got %d", n)
	}
	return fmt.Errorf("shardedlog: a charge of %d beside the %d the window holds would pass %d, the most a sliding log of limit %d holds in a window (%d times the limit, at most %d): %w",
		n, w, p.Bound(), p.limit, debtFactor, maxLogLimit, ErrDebtBound)
}

// expired reports whether an entry charged at ts has left the window that
// ends at t: t − ts ≥ T, computed without overflow.
func (p *Params) expired(ts, t int64) bool {
	return ts < t && uint64(t)-uint64(ts) >= uint64(p.period)
}

// after returns ts + T − t, the wait from t until an entry charged at ts
// leaves the window: 0 if it already has, Never if it would overflow.
func (p *Params) after(ts, t int64) time.Duration {
	const flip = 1 << 63 // maps int64 order onto uint64 order
	sum, carry := bits.Add64(uint64(ts)^flip, uint64(p.period), 0)
	diff, borrow := bits.Sub64(sum, uint64(t)^flip, 0)
	switch {
	case carry == 0 && borrow == 1:
		return 0
	case carry == 1 && borrow == 0, diff > math.MaxInt64:
		return Never
	}
	return time.Duration(diff)
}

// leaves returns ts + T, the instant at which an entry charged at ts has
// left every window, saturating at math.MaxInt64.
func (p *Params) leaves(ts int64) int64 {
	if ts > math.MaxInt64-p.period {
		return math.MaxInt64
	}
	return ts + p.period
}

// enters returns spent − T, the time at which an entry leaves the window
// at spent, or math.MinInt64 if that lies before the clock's first
// instant (the entry then leaves later than spent).
func (p *Params) enters(spent int64) int64 {
	if spent < math.MinInt64+p.period {
		return math.MinInt64
	}
	return spent - p.period
}
