package shardedlog

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Params is a validated rule for the sliding window log: at most Limit
// cost admitted in any window (now − Period, now].
type Params struct {
	limit  int64
	period int64
}

// maxLogLimit keeps the ring (at most the power of two above Limit+1
// entries) within what the 24-bit entry sequence tells apart.
const maxLogLimit = 1<<22 - 2

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
